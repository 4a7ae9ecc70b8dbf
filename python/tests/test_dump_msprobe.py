"""msprobe's own dump of the same model (its PrecisionDebugger runs on CPU torch) has the entries,
order, statistics and CRC-32s that trainscope.dump writes (issue 30 part 2)."""
from test_dump import load_dump, need_msprobe, run_job


def _same(ours, theirs, path, bad):
    if isinstance(ours, dict) and isinstance(theirs, dict):
        if set(ours) != set(theirs):
            bad.append((path, sorted(set(ours) ^ set(theirs))))
        for k in set(ours) & set(theirs):
            _same(ours[k], theirs[k], path + "." + k, bad)
    elif isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs):
            bad.append((path, len(ours), len(theirs)))
        for i, (x, y) in enumerate(zip(ours, theirs)):
            _same(x, y, "%s.%d" % (path, i), bad)
    elif isinstance(ours, float) and isinstance(theirs, (int, float)):
        if abs(ours - theirs) > 1e-6 * max(1.0, abs(theirs)):
            bad.append((path, ours, theirs))
    elif ours != theirs:
        bad.append((path, ours, theirs))


def test_same_entries_statistics_and_crc_as_msprobe(tmp_path):
    """msprobe's PrecisionDebugger runs on CPU torch: its md5-mode dump (statistics plus CRC-32)
    of the same model and input is the reference for names, order, records and CRCs."""
    need_msprobe()
    ours = load_dump(run_job(tmp_path / "ours", mode="md5"))
    theirs = load_dump(run_job(tmp_path / "msprobe", tool="msprobe", mode="md5"))
    assert ours["task"] == theirs["task"] == "statistics"
    assert (ours["level"], ours["framework"]) == (theirs["level"], theirs["framework"])
    assert list(ours["data"]) == list(theirs["data"])
    bad = []
    _same(ours["data"], theirs["data"], "data", bad)
    assert bad == []
