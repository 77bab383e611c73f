"""The test session's collector thresholds (support/gc_threshold.py): the young one raised, the
older generations' kept, and $TTE_GC_YOUNG obeyed."""
from __future__ import annotations

import gc

import pytest

from gc_threshold import YOUNG, raise_young_threshold


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 7, 9)           # a process's own, older thresholds distinct
    yield
    gc.set_threshold(*saved)


def test_only_the_young_generation_s_threshold_is_raised(thresholds, monkeypatch):
    monkeypatch.delenv("TTE_GC_YOUNG", raising=False)
    assert raise_young_threshold() == YOUNG
    assert gc.get_threshold() == (YOUNG, 7, 9)


def test_the_environment_restores_python_s_own(thresholds, monkeypatch):
    monkeypatch.setenv("TTE_GC_YOUNG", "700")
    assert raise_young_threshold() == 700
    assert gc.get_threshold() == (700, 7, 9)


def test_the_session_runs_with_it():
    assert gc.get_threshold()[0] == raise_young_threshold()
