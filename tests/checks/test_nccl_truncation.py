"""nccl-tests output cut at every point that matters is `error`, never `pass`.

The property in test_properties.py tries random cuts; these are the cuts that must never
slip through, as fixtures (tests/fixtures/checks/nccl/truncated/SOURCES.md says where each
was cut from): after the last row, between the two footer lines, inside a row. They are
`.out`, not `.txt`: test_fixtures_judged.py's table holds the `.txt` fixtures, this one these.
"""

from __future__ import annotations

import re

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.transcript import with_stderr
from tests.support.fixtures import FIXTURES

H100, H200, A100 = "h100-sxm", "h200-sxm", "a100-sxm-80gb"
NO_FOOTER = r"no nccl-tests footer after the (\d+) B row: the run hung or the output was cut"

# (cut fixture, uncut original, profile, the reason it must give)
CUTS = [
    (
        "8xh100_cut_after_header_error.out",
        "8xh100_full_sweep_ok.txt",
        H100,
        "nccl-tests printed its header but no result rows",
    ),
    ("8xh100_cut_mid_sweep_error.out", "8xh100_full_sweep_ok.txt", H100, NO_FOOTER.replace(r"(\d+)", "1048576")),
    (
        "8xh100_cut_after_last_row_error.out",
        "8xh100_full_sweep_ok.txt",
        H100,
        NO_FOOTER.replace(r"(\d+)", "8589934592"),
    ),
    (
        "8xh100_cut_inside_last_row_error.out",
        "8xh100_full_sweep_ok.txt",
        H100,
        r"result row has 8 fields, the header 13: '8589934592 .* 478\.12'",
    ),
    # The cut row is too short to read as a row: what is left ends at the 4 GiB row.
    (
        "8xh100_cut_inside_last_row_before_type_error.out",
        "8xh100_full_sweep_ok.txt",
        H100,
        NO_FOOTER.replace(r"(\d+)", "4294967296"),
    ),
    (
        "8xh100_cut_inside_out_of_bounds_line_error.out",
        "8xh100_full_sweep_ok.txt",
        H100,
        r"the output ends inside its footer \('# Out of bounds values : 0'\): cut short",
    ),
    (
        "8xh100_cut_between_out_of_bounds_and_avg_error.out",
        "8xh100_full_sweep_ok.txt",
        H100,
        NO_FOOTER.replace(r"(\d+)", "8589934592"),
    ),
    (
        "8xh100_srun_prefix_info_noise_cut_between_out_of_bounds_and_avg_error.out",
        "8xh100_srun_prefix_info_noise_ok.txt",
        H100,
        NO_FOOTER.replace(r"(\d+)", "8589934592"),
    ),
    (
        "a100_old_error_column_cut_between_out_of_bounds_and_avg_error.out",
        "a100_old_error_column_ok.txt",
        A100,
        NO_FOOTER.replace(r"(\d+)", "4294967296"),
    ),
    (
        "8xh200_218_header_cut_between_out_of_bounds_and_avg_error.out",
        "8xh200_218_header_ok.txt",
        H200,
        NO_FOOTER.replace(r"(\d+)", "8589934592"),
    ),
    (
        "8xh200_218_header_cut_inside_last_row_error.out",
        "8xh200_218_header_ok.txt",
        H200,
        r"result row has 10 fields, the header 13: '8589934592 .*'",
    ),
]


@pytest.mark.parametrize(("cut", "original", "profile", "reason"), CUTS, ids=[c[0] for c in CUTS])
def test_cut_output_is_an_error_never_a_pass(cut, original, profile, reason) -> None:
    text = (FIXTURES / "nccl" / "truncated" / cut).read_text()
    whole = (FIXTURES / "nccl" / original).read_text()
    assert whole.startswith(text) and len(text) < len(whole), f"{cut} is not a cut of {original}"
    assert judge("nccl", whole, profile).status is Status.PASS  # the uncut run is healthy

    result = judge("nccl", text, profile)

    assert result.status is Status.ERROR, result.reason
    assert re.fullmatch(reason, result.reason), result.reason


def test_every_cut_fixture_is_in_the_table_and_in_sources() -> None:
    directory = FIXTURES / "nccl" / "truncated"
    on_disk = {p.name for p in directory.iterdir()} - {"SOURCES.md"}
    assert on_disk == {c[0] for c in CUTS}
    sources = (directory / "SOURCES.md").read_text()
    for cut, original, *_ in CUTS:
        assert f"| {cut} | {original} |" in sources


# A real two-node run, verbatim after its two `# source:` lines; it ends with the footer's
# `# Avg bus bandwidth    : 70.742 ` line, as the original does.
REAL = "nccl/2x8xh100_a3mega_verbatim_ok.txt"


def _cuts_at_every_line(text: str) -> list[tuple[str, int]]:
    """For each line of the run: cut after its newline, just before it, and in its middle."""
    cuts, offset = [], 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        body = line.rstrip("\r\n")
        for name, at in (
            ("middle", offset + len(body) // 2),
            ("before-newline", offset + len(body)),
            ("after-newline", offset + len(line)),
        ):
            cuts.append((f"line {number} {name}", at))
        offset += len(line)
    return [(name, at) for name, at in cuts if 0 < at < len(text)]


@pytest.mark.parametrize(
    ("where", "at"), _cuts_at_every_line((FIXTURES / REAL).read_text()), ids=lambda v: v if isinstance(v, str) else None
)
def test_a_real_run_cut_anywhere_is_an_error(where, at) -> None:
    whole = (FIXTURES / REAL).read_text()
    # The whole run is judged (a warning: A3 Mega's 8x 200G carry less than h100-sxm's 8x NDR floor)
    assert judge("nccl", whole, H100).status is Status.WARN

    result = judge("nccl", whole[:at], H100)

    assert result.status is Status.ERROR, (where, whole[:at][-60:], result.reason)


@pytest.mark.parametrize("digits", ["7", "70", "70.", "70.7", "70.74", "70.742"])
def test_a_footer_cut_inside_its_value_is_an_error(digits) -> None:
    """The bug: `# Avg bus bandwidth    : 70.7` read as a complete footer and passed."""
    whole = (FIXTURES / REAL).read_text()
    cut = whole[: whole.index("# Avg bus bandwidth")] + f"# Avg bus bandwidth    : {digits}"
    result = judge("nccl", cut, H100)
    assert result.status is Status.ERROR and "ends inside its footer" in result.reason, result.reason


def test_stderr_judged_with_a_cut_stdout_does_not_complete_its_last_line() -> None:
    """The worker judges stdout and stderr together when stdout alone is unjudgeable (perftest
    says why it failed on stderr only): stderr must not end stdout's cut footer line."""
    whole = (FIXTURES / REAL).read_text()
    cut = whole[: whole.index("70.742") + 4]  # "... : 70.7"
    stderr = "ztan-mig-235z:6899:6899 [0] NCCL INFO comm 0x55 rank 0 nranks 16 - Destroy COMPLETE\n"
    assert judge("nccl", with_stderr(cut, stderr), H100).status is Status.ERROR
    assert judge("nccl", with_stderr(whole, stderr), H100).status is Status.WARN  # judged, as above
