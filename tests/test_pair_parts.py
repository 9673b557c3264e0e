"""The parts a PairHarness is composed of share its pair, not copies of it."""

from __future__ import annotations

from models.enums import QPState, QPType
from qpconform.engine.pair_post import INLINE_LEN, OVER_CAP_LIMIT
from qpconform.engine.park import Park
from tests.fake_pair import FAKE_MAX_INLINE, connected_fake


def test_wr_ids_are_unique_across_the_ends_and_their_bystanders() -> None:
    """One counter for the whole pair (posting), so a completion routed by qp_num can
    never be taken for another QP's WR."""
    h = connected_fake(QPType.RC, shared_cq_sides=frozenset({"a"}))
    h.shared.modify("a", QPState.INIT)
    ids = [h.post.recv("b"), h.shared.post_recv("a"), h.post.send("a")]
    assert len(set(ids)) == len(ids)
    h.quiet()


def test_inline_posts_follow_the_end_s_reported_cap() -> None:
    h = connected_fake(QPType.RC)
    assert h.post.max_inline("a") == FAKE_MAX_INLINE
    assert h.post.can_inline("a") == (FAKE_MAX_INLINE >= INLINE_LEN)
    assert h.post.can_inline("a", over_cap=True) == (FAKE_MAX_INLINE < OVER_CAP_LIMIT)


def test_the_park_holds_the_pair_s_parkable_part() -> None:
    """park() hands the park the harness's parkable part; closing it closes the pair."""
    park = Park()
    h = connected_fake(QPType.RC)
    h.parking = park
    h.park()
    assert [p.pair for p in park.pairs] == [h.parkable] and h.parked and not h.ended
    park.release()
    assert h.ended and not park.pairs
