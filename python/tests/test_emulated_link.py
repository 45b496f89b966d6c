

def test_a_recorded_replay_timeline_has_every_op_its_copies_and_the_held_bytes(gpt):
    build, _, peak = gpt
    budget = peak // 2
    session = ho.OffloadSession(ho.OffloadConfig(max_resident_activation_bytes=budget, planner="peak",
                                                 copy_bandwidth_gib_per_s=SLOW_LINK_GIB_PER_S,
                                                 emulate_copy_bandwidth=True, record_timeline=True))
    results = train(build, session, steps=2)
    assert session.last_timeline() is not None
    timeline, stats = session.last_timeline(), results[1].stats
    ops = [s for s in timeline["spans"] if s["kind"] == "op"]
    assert [s["op"] for s in ops] == list(range(stats["ops"]))
    assert all(s["lane"] == "compute" and 0 <= s["start_ms"] <= s["end_ms"] for s in ops)
    d2h = [s for s in timeline["spans"] if s["kind"] == "copy_d2h"]
    assert len(d2h) == stats["d2h_count"] and sum(s["bytes"] for s in d2h) == stats["d2h_bytes"]
    assert all(s["lane"] == "copy0" for s in d2h)
    # Each copy lasted at least its bytes over the emulated link.
    for s in d2h:
        assert s["end_ms"] - s["start_ms"] >= s["bytes"] / (SLOW_LINK_GIB_PER_S * 2**30) * 1e3 * 0.99
    # Memory samples are held bytes: their peak is the step's.
    assert max(b for _, b in timeline["memory"]) == stats["peak_held_bytes"] <= budget == timeline["budget_bytes"]
    assert ho.OffloadSession().last_timeline() is None
