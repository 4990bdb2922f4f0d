"""nccl-tests output cut at every point that matters is `error`, never `pass`.

The property in test_properties.py tries random cuts; these are the cuts that must never
slip through, as fixtures (tests/fixtures/checks/nccl/truncated/SOURCES.md says where each
was cut from): after the last row, between the two footer lines, inside a row. They are
`.out`, not `.txt`: test_fixtures_judged.py's table holds the `.txt` fixtures, this one these.
"""

from __future__ import annotations

import re

import pytest

from checks import Status, judge
from tests.checks.conftest import FIXTURES

H100, H200, A100 = "h100-sxm", "h200-sxm", "a100-sxm-80gb"
NO_FOOTER = r"no nccl-tests footer after the (\d+) B row: the run hung or the output was cut"

# (cut fixture, uncut original, profile, the reason it must give)
CUTS = [
    ("8xh100_cut_after_header_error.out", "8xh100_full_sweep_ok.txt", H100,
     "nccl-tests printed its header but no result rows"),
    ("8xh100_cut_mid_sweep_error.out", "8xh100_full_sweep_ok.txt", H100, NO_FOOTER.replace(r"(\d+)", "1048576")),
    ("8xh100_cut_after_last_row_error.out", "8xh100_full_sweep_ok.txt", H100, NO_FOOTER.replace(r"(\d+)", "8589934592")),
    ("8xh100_cut_inside_last_row_error.out", "8xh100_full_sweep_ok.txt", H100,
     r"result row has 8 fields, the header 13: '8589934592 .* 478\.12'"),
    # The cut row is too short to read as a row: what is left ends at the 4 GiB row.
    ("8xh100_cut_inside_last_row_before_type_error.out", "8xh100_full_sweep_ok.txt", H100,
     NO_FOOTER.replace(r"(\d+)", "4294967296")),
    ("8xh100_cut_inside_out_of_bounds_line_error.out", "8xh100_full_sweep_ok.txt", H100,
     NO_FOOTER.replace(r"(\d+)", "8589934592")),
    ("8xh100_cut_between_out_of_bounds_and_avg_error.out", "8xh100_full_sweep_ok.txt", H100,
     NO_FOOTER.replace(r"(\d+)", "8589934592")),
    ("8xh100_srun_prefix_info_noise_cut_between_out_of_bounds_and_avg_error.out",
     "8xh100_srun_prefix_info_noise_ok.txt", H100, NO_FOOTER.replace(r"(\d+)", "8589934592")),
    ("a100_old_error_column_cut_between_out_of_bounds_and_avg_error.out", "a100_old_error_column_ok.txt", A100,
     NO_FOOTER.replace(r"(\d+)", "4294967296")),
    ("8xh200_218_header_cut_between_out_of_bounds_and_avg_error.out", "8xh200_218_header_ok.txt", H200,
     NO_FOOTER.replace(r"(\d+)", "8589934592")),
    ("8xh200_218_header_cut_inside_last_row_error.out", "8xh200_218_header_ok.txt", H200,
     r"result row has 10 fields, the header 13: '8589934592 .*'"),
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
