import pytest
from hypothesis import given
from hypothesis import strategies as st

from windowsmith.budget import Budget, BudgetConfig, allocate
from windowsmith.errors import ConfigError


def test_available_is_window_minus_reserved_minus_slack():
    b = Budget.for_window(8000, 4096, BudgetConfig())
    assert b.reserved_output == 2000  # capped at a quarter of the window
    assert b.slack == 160
    assert b.available == 8000 - 2000 - 160
    big = Budget.for_window(1_000_000, 64_000, BudgetConfig())
    assert big.reserved_output == 16_384


def test_explicit_reserve_and_impossible_budget():
    assert Budget.for_window(8000, 4096, BudgetConfig(reserved_output=1000)).reserved_output == 1000
    with pytest.raises(ConfigError, match="leave nothing"):
        Budget.for_window(1000, 4096, BudgetConfig(reserved_output=990))


@pytest.mark.parametrize("kwargs, msg", [
    ({"warn_at": 0.9, "compact_at": 0.8}, "warn_at <= compact_at"),
    ({"slack": 0.7}, "slack"),
    ({"weights": {"history": -1}}, "weight of layer 'history'"),
    ({"reserved_output": -5}, "reserved_output"),
])
def test_bad_config_is_refused(kwargs, msg):
    with pytest.raises(ConfigError, match=msg):
        BudgetConfig(**kwargs)


def test_everything_fits_everyone_gets_what_they_want():
    assert allocate(1000, {"history": 300, "memory": 100}, {"history": 0.7, "memory": 0.1}) == {"history": 300, "memory": 100}


def test_memory_is_cut_before_history():
    alloc = allocate(1000, {"history": 900, "memory": 500}, {"history": 0.7, "memory": 0.1})
    # memory is cut to its guaranteed share (1000 * 0.1/0.8 = 125) before history loses anything
    assert alloc["memory"] == 125
    assert alloc["history"] == 875
    assert sum(alloc.values()) == 1000


def test_same_config_scales_with_the_window():
    small = allocate(8_000, {"history": 10**7, "knowledge": 10**7}, {"history": 0.7, "knowledge": 0.1})
    large = allocate(1_000_000, {"history": 10**9, "knowledge": 10**9}, {"history": 0.7, "knowledge": 0.1})
    assert small["knowledge"] / 8_000 == pytest.approx(large["knowledge"] / 1_000_000, abs=1e-3)


@given(
    total=st.integers(0, 10**6),
    wants=st.dictionaries(st.sampled_from(["history", "memory", "evidence", "knowledge", "custom"]), st.integers(0, 10**6)),
)
def test_allocation_never_exceeds_total_or_wants(total, wants):
    alloc = allocate(total, wants, {"history": 0.7, "memory": 0.06, "evidence": 0.06, "knowledge": 0.1})
    assert sum(alloc.values()) <= max(total, 0) or sum(wants.values()) <= total
    assert all(0 <= alloc[k] <= wants[k] for k in wants)
    if sum(wants.values()) > total:
        assert sum(alloc.values()) == total
