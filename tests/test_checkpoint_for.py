"""Which runs get a checkpoint (fl_strategies/protocol/checkpoint.py ``checkpoint_for``), without running one.

``checkpoint_for`` reads only the strategy's run config, ``resumable``, ``resume_problem()`` and ``num_rounds``; a
stand-in with those attributes asks it every question a strategy can, in milliseconds (``test_resume.py`` asks
the same through whole runs).
"""

from __future__ import annotations

import pytest

from fl_strategies.protocol import checkpoint as ck
from fl_strategies.settings.config import ConfigError


class Strategy:
    """What ``checkpoint_for`` reads of a strategy."""

    def __init__(self, name: str, directory: str, resume: bool = False, resumable: bool = True,
                 problem: str | None = None) -> None:
        self.cfg = {"strategy": name, "checkpoint-dir": directory, "resume": resume}
        self.resumable, self.problem, self.num_rounds = resumable, problem, 3

    def resume_problem(self) -> str | None:
        return self.problem


def test_without_a_directory_there_is_no_checkpoint_and_resume_is_refused():
    assert ck.checkpoint_for(Strategy("fedpower", "")) is None
    assert ck.checkpoint_for(Strategy("faps", "", resumable=False, problem="any")) is None
    with pytest.raises(ConfigError, match="resume = true needs checkpoint-dir"):
        ck.checkpoint_for(Strategy("fedpower", "", resume=True))


@pytest.mark.parametrize("name", sorted(ck.NOT_RESUMABLE))
def test_a_strategy_that_cannot_resume_is_refused_naming_it_and_its_reason(tmp_path, name):
    with pytest.raises(ConfigError) as refused:
        ck.checkpoint_for(Strategy(name, str(tmp_path), resumable=False))
    assert f"strategy {name!r} cannot resume: {ck.NOT_RESUMABLE[name]}." in str(refused.value)
    with pytest.raises(ConfigError, match="strategy 'newer' cannot resume: newer's state is not checkpointed"):
        ck.checkpoint_for(Strategy("newer", str(tmp_path), resumable=False))


def test_a_strategy_that_does_not_say_it_can_resume_is_refused(tmp_path):
    """Only a strategy that declares ``resumable`` gets a checkpoint: an object without the attribute is refused."""
    unknown = Strategy("newer", str(tmp_path))
    del unknown.resumable
    with pytest.raises(ConfigError, match="strategy 'newer' cannot resume"):
        ck.checkpoint_for(unknown)


def test_a_run_the_strategy_refuses_to_checkpoint_is_refused_with_its_reason(tmp_path):
    with pytest.raises(ConfigError, match="this run cannot resume: noise from the OS"):
        ck.checkpoint_for(Strategy("fedpower", str(tmp_path), problem="noise from the OS"))


def test_a_resumable_run_gets_the_checkpoint_of_its_directory_and_round_count(tmp_path):
    made = ck.checkpoint_for(Strategy("fedpower", str(tmp_path)))
    assert isinstance(made, ck.Checkpoint)
    assert made.path == tmp_path / ck.CHECKPOINT_FILE and made.num_rounds == 3 and made.resumed is None
