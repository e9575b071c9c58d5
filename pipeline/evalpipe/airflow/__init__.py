"""evalpipe for Airflow 3 (`pip install evalpipe[airflow]`): `EvalpipeOperator`, a job config
run as a task whose XCom is the run's summary and whose retry resumes without paying twice.

    from evalpipe.airflow import EvalpipeOperator

    score = EvalpipeOperator(
        task_id="score_reviews",
        config="/srv/evalpipe/configs/nightly.yaml",
        partition={"dt": "{{ ds }}"},
        max_cost=25,
        retries=2,
    )

The how-to (docs/how-to/schedulers.md) has the DAG; `evalpipe.airflow.operator` says how exit
codes become Airflow's meaning and how lineage is sent once.
"""

from typing import TYPE_CHECKING

from evalpipe.lazy import lazy_exports

if TYPE_CHECKING:
    from evalpipe.airflow.operator import (
        EvalpipeOperator as EvalpipeOperator,
        airflow_sends_lineage as airflow_sends_lineage,
    )

__all__, __getattr__ = lazy_exports(__name__)
