"""Where the job's Ray actors run: the Budget beside the driver, the Workers spread over nodes.

On a cluster, nodes come and go (a spot instance reclaimed, a pod evicted, a node scaled down).
The job survives losing any node but the driver's, because:

- the Budget (the account's pacing, which every worker leases from) is pinned to the driver's
  node (`NodeAffinitySchedulingStrategy`, hard). Left to Ray it could land on a worker node,
  and losing that node killed the Budget and with it every worker's next lease: each
  replacement worker failed at once, until the job gave up ("workers died 21 times");
- each Worker is placed, hard, on a live node chosen here: the one with the fewest of this
  job's live workers, nodes other than the driver's first (the driver reads the corpus and
  writes the output). So the workers spread over the nodes, the job knows where each one runs
  (the summary says how many workers ran on how many nodes), and a replacement never goes to a
  node the cluster reports dead.

On one machine there is one node, and all of this places everything on it, as before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any


def driver_node() -> str:
    """The id of the node the driver runs on."""
    import ray

    return str(ray.get_runtime_context().get_node_id())


def on_node(node: str) -> Any:
    """A hard placement on `node`: the actor runs there or not at all."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id=node, soft=False)


def alive_nodes() -> list[str]:
    """The ids of the nodes the cluster reports alive, in the cluster's order."""
    import ray

    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [str(n["NodeID"]) for n in nodes if n.get("Alive")]


def choose_node(alive: list[str], homes: Iterable[str | None], driver: str) -> str:
    """Of the `alive` nodes, the one with the fewest of the job's live workers (`homes`: the
    node of each); on a tie, a node other than the driver's, then the cluster's order."""
    load = Counter(home for home in homes if home is not None)
    order = {node: i for i, node in enumerate(alive)}
    return min(alive, key=lambda node: (load[node], node == driver, order[node]))
