"""nvidia-smi's default table judged for what it shows: each rule broken once on the real
8x H100 table (thamada/nvidia-smi, captured), one cell changed, to watch it catch the fault."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.nvidia_smi import parse_nvidia_smi
from tests.support.fixtures import fixture_text

TABLE = fixture_text("nvidia_smi/table_8xh100_ok.txt")
GPU2_ROW = "|   2  NVIDIA H100 80GB HBM3          On  |   00000000:3A:00.0 Off |                    0 |"
GPU2_STATE = "| N/A   31C    P0             85W /  700W |       1MiB /  81559MiB |      0%      Default |"


def with_row(old: str, new: str) -> str:
    assert old in TABLE
    return TABLE.replace(old, new)


def test_the_table_reads_every_gpu_with_its_cells():
    report = parse_nvidia_smi(TABLE)
    assert [g.index for g in report.gpus] == list(range(8))
    assert report.driver_version == "565.57.01" and report.table and report.table_complete
    gpu = report.gpus[2]
    assert (gpu.bus_id, gpu.temperature_c, gpu.power_draw_w, gpu.power_limit_w) == ("00000000:3A:00.0", 31, 85, 700)
    assert gpu.ecc_uncorrected_volatile == 0


@pytest.mark.parametrize(
    ("old", "new", "status", "what"),
    [
        (
            GPU2_ROW,
            GPU2_ROW.replace("                    0 |", "                    2 |"),
            Status.FAIL,
            "2 uncorrectable",
        ),
        (GPU2_ROW, GPU2_ROW.replace("                    0 |", "                 ERR! |"), Status.FAIL, "ERR!"),
        (GPU2_STATE, GPU2_STATE.replace("N/A   31C", "ERR!  31C"), Status.FAIL, "fan.speed: ERR!"),
        (GPU2_STATE, GPU2_STATE.replace("31C", "85C"), Status.WARN, "GPU temperature 85"),
        (GPU2_STATE, GPU2_STATE.replace("31C", "90C"), Status.FAIL, "GPU temperature 90"),
        (GPU2_ROW, GPU2_ROW.replace("NVIDIA H100 80GB HBM3 ", "NVIDIA A100-SXM4-80GB "), Status.FAIL, "not a h100"),
    ],
)
def test_a_fault_in_one_cell_is_found_on_its_gpu(old, new, status, what):
    result = judge("nvidia-smi", with_row(old, new), "h100-sxm")
    assert result.status is status, result.reason
    assert any(what in f.what and f.where == "GPU 2" for f in result.findings), result.findings


def test_ecc_off_is_said_not_checked_and_never_counted_as_zero():
    rows = TABLE.replace("|                    0 |", "|                  Off |")
    result = judge("nvidia-smi", rows, "h100-sxm")
    assert result.status is Status.PASS
    assert result.metrics["ecc_uncorrected_volatile"] is None
    assert "ECC not reported, not checked" in result.reason


@pytest.mark.parametrize(
    ("shown", "profile", "fits"),
    [
        ("NVIDIA A100-SXM...", "a100-sxm-80gb", True),
        ("NVIDIA H100 80GB ...", "h100-sxm", True),
        ("NVIDIA A100-SXM...", "h100-sxm", False),
        ("NVIDIA GeForce ...", "h100-sxm", False),
    ],
)
def test_a_name_the_table_cut_is_held_to_what_it_shows(shown, profile, fits):
    result = judge(
        "nvidia-smi", with_row(GPU2_ROW, GPU2_ROW.replace("NVIDIA H100 80GB HBM3", shown.ljust(21))), profile
    )
    wrong_model = [f for f in result.findings if "is not a" in f.what and f.where == "GPU 2"]
    assert (wrong_model == []) is fits, wrong_model


def test_a_table_cut_inside_a_gpu_block_is_an_error():
    cut = TABLE[: TABLE.index(GPU2_STATE)]
    result = judge("nvidia-smi", cut, "h100-sxm")
    assert result.status is Status.ERROR
    assert "GPU 2" in result.reason


def test_a_lost_gpu_line_above_the_table_is_reported_with_the_gpus_it_lists():
    lost = "Unable to determine the device handle for GPU 0000:DB:00.0: Unknown Error\n"
    seven = fixture_text("nvidia_smi/table_7xh100_gpu_missing_fail.txt")
    result = judge("nvidia-smi", lost + seven, "h100-sxm")
    assert result.status is Status.FAIL
    assert result.metrics["gpu_count"] == 7
    assert any(f.where == "0000:DB:00.0" for f in result.findings)


def test_a_gpu_row_the_table_garbles_is_an_error_never_a_gpu_less():
    garbled = with_row(
        GPU2_ROW, "|   2  ERR!                           ERR!|              ERR!  ERR! |                 ERR! |"
    )
    result = judge("nvidia-smi", garbled, None)
    assert result.status is Status.ERROR and "unreadable GPU row" in result.reason


def test_the_processes_table_below_is_not_read_as_gpus():
    busy = TABLE.replace(
        "|  No running processes found                                                             |",
        "|    0   N/A  N/A      4117      C   python                                      80000MiB |",
    )
    assert judge("nvidia-smi", busy, "h100-sxm").status is Status.PASS


def test_the_memory_judgement_fails_on_the_tables_ecc_but_never_clears_the_memory_on_it():
    assert judge("nvidia-smi-memory", TABLE, "h100-sxm").status is Status.ERROR
    uncorrectable = with_row(GPU2_ROW, GPU2_ROW.replace("                    0 |", "                    2 |"))
    assert judge("nvidia-smi-memory", uncorrectable, "h100-sxm").status is Status.FAIL
