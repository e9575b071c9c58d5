"""The driver's batch intake: the cyclic GC is held for a batch and never left off."""

from __future__ import annotations

import gc

import pytest

from evalpipe.engine.intake import gc_paused


def test_the_gc_is_held_for_the_block_and_on_again_after_an_error() -> None:
    assert gc.isenabled()
    with pytest.raises(ValueError), gc_paused():
        assert not gc.isenabled()
        raise ValueError("a batch that fails")
    assert gc.isenabled()


def test_a_caller_that_turned_the_gc_off_keeps_it_off() -> None:
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
