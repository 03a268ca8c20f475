"""A value an event cannot hold is named by the event it is in, whatever its kind."""

import pytest

from oloproof.events import EnvironmentStateRecorded
from oloproof.recorder.record import UnfitValue, _check_values


def test_a_nan_in_the_environment_state_is_named_not_a_crash() -> None:
    with pytest.raises(UnfitValue, match=r"environment_state\.v1\.state"):
        _check_values([EnvironmentStateRecorded({"x": float("nan")})])
