"""Every ```python block of README.md and docs/*.md runs as written, through the real commrun.

The line directly above each ```python fence (no blank line between) is an HTML comment saying how
the block is checked; a python block without one fails `test_every_python_block_is_marked`:

    <!-- run: commrun -n 2,4 -->
        a complete program: written to a file and run under `commrun -n N` for each N listed
        (other commrun options may come before -n: `<!-- run: commrun --mpi4py -n 3,4 -->`), as
        __main__ in a job that runs the blocks of the same size, options and needs one after another
        (cases/run_examples.py; a torch block, which sets up torch's process group, in a job of its own);
    <!-- run: continues the program above -->
        a fragment: appended to the nearest `run: commrun` block above it in the same file and run
        with that block's sizes and options (fragments do not chain: each continues a program);
    <!-- not run: REASON -->
        only for blocks that need what this machine cannot give (a Ray, Slurm or Kubeflow
        cluster); REASON says where the suite runs the same code instead. The block must compile.

Either `run` marker may end with `; needs MODULE[, MODULE...]`: the block is skipped where one of
them does not import (pytest.importorskip). Every block, run or not, must compile.

Commands in README.md's other fenced blocks that run a file of this repository through commrun
(`commrun -n 4 examples/hello.py`) run as well, from the repository root.
"""
import glob
import os
import re
import shlex
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "multirank"))
import _harness  # noqa: E402

REPO = _harness.REPO
FILES = ["README.md"] + sorted(os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
FENCE = re.compile(r"^ {0,3}(`{3,})\s*([^`\s]*)[^`]*$")
MARKER = re.compile(r"^<!--\s*(run|not run):\s*(.*?)\s*-->\s*$")
PROGRAM = re.compile(r"^commrun\s+(.*)$")
CONTINUES = "continues the program above"
RUN_TIMEOUT = 100  # seconds for one commrun job; COMMLIB_TIMEOUT (30 s) turns a hang into an error first


class Block:
    def __init__(self, path, line, lang, source, above):
        self.path, self.line, self.lang, self.source, self.above = path, line, lang, source, above
        self.kind = None  # "program" | "fragment" | "not run"
        self.sizes, self.options, self.needs = [], [], []
        self.base = None  # the program a fragment continues
        self.problem = None

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    def parts(self):
        """[(where, source)] of what runs: the program, then this fragment."""
        return (self.base.parts() if self.base else []) + [(self.where, self.source)]


def fenced_blocks(path):
    """Every fenced block of a Markdown file: Block(path, line of the opening fence, info string's
    first word, source, the line directly above the fence)."""
    with open(os.path.join(REPO, path), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        ticks, lang, start = m.group(1), m.group(2).lower(), i
        i += 1
        while i < len(lines) and not re.match(r"^ {0,3}" + ticks + r"`*\s*$", lines[i]):
            i += 1
        blocks.append(Block(path, start + 1, lang, "\n".join(lines[start + 1:i]) + "\n",
                            lines[start - 1] if start > 0 else ""))
        i += 1  # past the closing fence (or the end of an unclosed block)
    return blocks


def classify(block, last_program):
    m = MARKER.match(block.above)
    if not m:
        block.problem = f"{block.where}: no marker on the line directly above the ```python fence"
        return
    verb, text = m.groups()
    if verb == "not run":
        block.kind = "not run"
        if not text:
            block.problem = f"{block.where}: `not run` needs a reason"
        return
    what, _, needs = text.partition(";")
    what, needs = what.strip(), needs.strip()
    if needs:
        if not needs.startswith("needs "):
            block.problem = f"{block.where}: after `;` the marker takes `needs MODULE, ...`, not {needs!r}"
            return
        block.needs = [n.strip() for n in needs[len("needs "):].split(",") if n.strip()]
    if what == CONTINUES:
        if last_program is None:
            block.problem = f"{block.where}: a fragment with no `run: commrun` program above it in {block.path}"
            return
        block.kind, block.base = "fragment", last_program
        block.sizes, block.options = last_program.sizes, last_program.options
        block.needs = last_program.needs + [n for n in block.needs if n not in last_program.needs]
        return
    p = PROGRAM.match(what)
    args = shlex.split(p.group(1)) if p else []
    if "-n" not in args or args.index("-n") + 1 >= len(args):
        block.problem = f"{block.where}: cannot read the marker {block.above.strip()!r}"
        return
    k = args.index("-n")
    try:
        block.sizes = [int(s) for s in args[k + 1].split(",")]
    except ValueError:
        block.problem = f"{block.where}: `-n` takes sizes such as 2,4, not {args[k + 1]!r}"
        return
    block.kind, block.options = "program", args[:k] + args[k + 2:]


def python_blocks():
    found = []
    for path in FILES:
        last_program = None
        for block in fenced_blocks(path):
            if block.lang != "python":
                continue
            classify(block, last_program)
            if block.kind == "program":
                last_program = block
            found.append(block)
    return found


BLOCKS = python_blocks()
RUNS = [pytest.param(b, n, id=f"{b.where}-n{n}") for b in BLOCKS if b.kind in ("program", "fragment")
        for n in b.sizes]


def readme_commands():
    """`commrun ...` commands of README.md's non-python blocks whose arguments name a file of the repo."""
    found = []
    for block in fenced_blocks("README.md"):
        if block.lang == "python":
            continue
        for k, line in enumerate(block.source.splitlines(), block.line + 1):
            for command in line.split("#")[0].split("&&"):
                argv = shlex.split(command)
                if argv[:1] == ["commrun"] and any(os.path.isfile(os.path.join(REPO, a)) for a in argv[1:]):
                    found.append(pytest.param(argv[1:], id=f"README.md:{k}"))
    return found


def test_extraction_finds_the_blocks():
    assert len(BLOCKS) > 15, f"only {len(BLOCKS)} python blocks extracted from {FILES}"
    assert len(RUNS) > 20, f"only {len(RUNS)} runs of python blocks"
    files = {b.path for b in BLOCKS}
    assert {"README.md", "docs/api.md", "docs/mesh.md", "docs/torch.md"} <= files, sorted(files)


def test_every_python_block_is_marked():
    problems = [b.problem for b in BLOCKS if b.problem]
    assert not problems, ("every ```python fence needs, on the line directly above it, `<!-- run: commrun -n 2,4 -->`, "
                          f"`<!-- run: {CONTINUES} -->` or `<!-- not run: REASON -->` (see this file's docstring):\n"
                          + "\n".join(problems))


@pytest.mark.timeout(30)
@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in BLOCKS])
def test_block_compiles(block):
    compile("".join(src for _, src in block.parts()), block.where, "exec")


def job_key(block, n):
    """The blocks of one (commrun options, size, needed modules) run in one job, one after another;
    a torch block has a job of its own (each calls init_process_group once, as a program does)."""
    return tuple(block.options), n, tuple(block.needs), block.where if "torch" in block.needs else ""


_JOBS = {}  # job_key -> (tmp dir, _harness.examples_job()'s result)
SELECTED = {}  # job_key -> [Block] this session selected (conftest's pytest_collection_finish)


def _file_name(block):
    """The file a block runs as (unique per block, its place in the docs readable in it)."""
    return re.sub(r"[^\w]+", "_", block.where) + ".py"


def _job(block, n, tmp_path_factory):
    key = job_key(block, n)
    if key not in _JOBS:
        blocks = SELECTED.get(key) or [block]
        tmp = tmp_path_factory.mktemp("docs")
        for b in blocks:
            (tmp / _file_name(b)).write_text("".join(src for _, src in b.parts()))
        timeout = RUN_TIMEOUT + 20 * len(blocks)
        _JOBS[key] = tmp, _harness.examples_job(n, [str(tmp / _file_name(b)) for b in blocks],
                                                {"COMMLIB_TIMEOUT": "30"}, timeout, options=block.options, cwd=str(tmp))
    return _JOBS[key]


@pytest.mark.timeout(RUN_TIMEOUT + 20 * 20)
@pytest.mark.parametrize("block, n", RUNS)
def test_block_runs(block, n, tmp_path_factory):
    """The blocks of a size (and options, and needed modules) run one after another in one job, as
    programs run as __main__: the first item of a job runs it (about 30 s for the 14 blocks at n = 4)."""
    for module in block.needs:
        pytest.importorskip(module)
    tmp, (rc, printed, failed, out, err) = _job(block, n, tmp_path_factory)
    name, first, layout = _file_name(block), 1, []
    for where, src in block.parts():  # which lines of the file (named in a traceback) came from which block
        lines = src.count("\n")
        layout.append(f"  lines {first}-{first + lines - 1} of {name}: {where}")
        first += lines
    report = (f"{block.where} at n={n}, run as {tmp / name} in a job of the blocks with options "
              f"{block.options or 'none'} (exit code {rc})\n" + "\n".join(layout)
              + f"\n--- stdout (tail)\n{_harness._tail(out)}\n--- stderr (tail)\n{_harness._tail(err)}")
    assert name in printed, f"the job ended before the block ran: {report}"
    assert name not in failed, "\n".join(failed[name]) + "\n" + report
    done = {r for r, text in printed[name] if text == f"EXAMPLE-OK {name}"}
    assert done == set(range(n)), f"only ranks {sorted(done)} finished the block: {report}"
    assert "refused a connection" not in err, f"a clean job logged a refusal:\n{_harness._tail(err)}"


@pytest.mark.timeout(RUN_TIMEOUT + 20)
@pytest.mark.parametrize("args", readme_commands())
def test_readme_command_runs(args):
    argv = [sys.executable, "-m", "commrun", *args]
    rc, out, err = _harness._communicate(argv, _harness.base_env({"COMMLIB_TIMEOUT": "30"}), RUN_TIMEOUT, cwd=REPO)
    assert rc == 0, f"commrun {' '.join(args)}: exit code {rc}\n{_harness._tail(out)}\n{_harness._tail(err)}"


def _commrun_options_named(line):
    """The --options a line of the docs gives commrun (up to its program: `x.py`, `--`, `-m mod`)."""
    found = []
    for m in re.finditer(r"\bcommrun((?:[ \t]+[^\s`|;&#]+)+)", line):
        tokens = m.group(1).split()
        for k, tok in enumerate(tokens):
            if tok == "--" or tok.endswith(".py") or (k > 0 and tokens[k - 1] in ("-m", "--module")):
                break
            if re.fullmatch(r"--[a-z][\w-]*(=.*)?", tok):
                found.append(tok.split("=", 1)[0])
    return found


def test_every_commrun_option_the_docs_name_exists():
    from commrun import cli
    options = {o for p in cli.main.params for o in p.opts + p.secondary_opts} | {"--help", "--version"}
    assert _commrun_options_named("`commrun --doctor --pair-timeout 2 -n 4 x.py --lr 1`") == ["--doctor",
                                                                                             "--pair-timeout"]
    unknown = []
    for path in FILES:
        with open(os.path.join(REPO, path), encoding="utf-8") as f:
            for k, line in enumerate(f, 1):
                unknown += [f"{path}:{k}: {o}" for o in _commrun_options_named(line) if o not in options]
    assert not unknown, "the docs name commrun options it does not have:\n" + "\n".join(unknown)
