"""commrun's tagged output ("[R] line") taken apart by rank, for the launcher tests."""
import re


def by_rank(stdout):
    """{rank: [its lines, in order]}; every line must carry a rank's tag."""
    out = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"\[(\d+)\] (.*)", line)
        assert m, f"untagged line {line!r}"
        out.setdefault(int(m[1]), []).append(m[2])
    return out
