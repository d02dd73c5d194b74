"""DNA strategies: thresholds, and reproducible draws from the per-chat seeded generator."""

from __future__ import annotations

import pytest

from stbme.dna.strategy import DAY, STRATEGIES, Strategy, chat_rng


@pytest.mark.parametrize("name,threshold", [("balanced", 0.5), ("aggressive", 0.2), ("conservative", 0.8),
                                            ("cleanup", 1.0)])
def test_remember_threshold_is_one_minus_new_weight(name, threshold):
    s = Strategy(name)
    assert s.remember_threshold == pytest.approx(threshold)
    assert s.should_remember(threshold) and not s.should_remember(threshold - 0.01)


def test_cleanup_never_remembers_a_signal():
    assert not Strategy("cleanup").should_remember(0.98)  # the confidence cap


def test_conservative_needs_emphasis_or_negation():
    s = Strategy("conservative")
    assert not s.should_remember(0.7) and not s.should_remember(0.75) and s.should_remember(0.8)


def test_seed_weights():
    assert {k: (v.new_memory_weight, v.reinforce_weight, v.decay_weight) for k, v in STRATEGIES.items()} == {
        "balanced": (0.5, 0.3, 0.2), "aggressive": (0.8, 0.15, 0.05),
        "conservative": (0.2, 0.4, 0.4), "cleanup": (0.0, 0.2, 0.8)}


def test_unknown_strategy_is_an_error():
    with pytest.raises(ValueError, match="unknown strategy 'bold'"):
        Strategy("bold")


def decisions(name: str, chat: str, counter: int, n: int = 400) -> list[bool]:
    s = Strategy(name, chat_rng(chat, counter))
    return [s.should_decay(0.0, 10 * DAY, 7) for _ in range(n)]


def test_same_chat_and_counter_give_the_same_draws():
    assert decisions("balanced", "chat-a", 3) == decisions("balanced", "chat-a", 3)
    assert decisions("balanced", "chat-a", 3) != decisions("balanced", "chat-a", 4)
    assert decisions("balanced", "chat-a", 3) != decisions("balanced", "chat-b", 3)


def test_fixed_seed_decisions():
    """A decision is the seeded draw compared with the strategy's weight (the seed's rule)."""
    rng = chat_rng("chat-a", 0)
    draws = [rng.random() for _ in range(20)]
    s = Strategy("balanced", chat_rng("chat-a", 0))
    assert [s.should_decay(0.0, 8 * DAY, 7) for _ in range(20)] == [x < 0.2 for x in draws]
    assert any(x < 0.2 for x in draws) and not all(x < 0.2 for x in draws)


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_decay_rate_follows_the_weight(name):
    share = sum(decisions(name, "chat-rate", 0, 4000)) / 4000
    assert share == pytest.approx(STRATEGIES[name].decay_weight, abs=0.03)


def test_decay_needs_more_than_decay_days_idle():
    s = Strategy("cleanup", chat_rng("c", 0))
    assert not any(s.should_decay(0.0, 7 * DAY, 7) for _ in range(200))   # exactly 7 days: not more
    assert any(s.should_decay(0.0, 7.01 * DAY, 7) for _ in range(200))


def test_reinforce_needs_more_than_three_accesses():
    s = Strategy("conservative", chat_rng("c", 1))
    assert not any(s.should_reinforce(3) for _ in range(200))
    share = sum(s.should_reinforce(4) for _ in range(4000)) / 4000
    assert share == pytest.approx(0.4, abs=0.03)


def test_no_draw_is_spent_when_the_condition_fails():
    """Only memories that qualify consume draws, so adding unused-but-recent memories does not change
    which idle memories decay (reproducible as the chat grows)."""
    a = Strategy("balanced", chat_rng("c", 9))
    b = Strategy("balanced", chat_rng("c", 9))
    plain = [a.should_decay(0.0, 30 * DAY, 7) for _ in range(50)]
    mixed = []
    for _ in range(50):
        assert not b.should_decay(29 * DAY, 30 * DAY, 7)  # recent: no draw
        mixed.append(b.should_decay(0.0, 30 * DAY, 7))
    assert plain == mixed
