"""What the parsers read out of each format, beyond the verdict."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.dcgm import parse_dcgm
from fleetctl.checks.hpl import parse_hpl
from fleetctl.checks.ib import parse_ib_write_bw, parse_ibstat
from fleetctl.checks.nccl import parse_nccl
from fleetctl.checks.nvidia_smi import parse_nvidia_smi
from tests.support.fixtures import fixture_text


def test_nccl_metrics_are_taken_at_the_largest_size():
    result = judge("nccl", fixture_text("nccl/8xh100_full_sweep_ok.txt"), "h100-sxm")
    m = result.metrics
    assert m["busbw_gbps"] == pytest.approx(478.12)
    assert m["largest_size_bytes"] == 8 * 1024**3
    assert m["wrong"] == 0 and m["ranks"] == 8 and m["hosts"] == 1
    assert m["avg_busbw_gbps"] > 0


def test_nccl_wrong_counts_in_g_format_are_summed():
    run = parse_nccl(fixture_text("nccl/2node_wrong_gformat_fail.txt"))
    assert run.wrong > 1e8 and run.out_of_bounds == 108 and run.out_of_bounds_failed


def test_nccl_validation_off_reports_wrong_as_unknown():
    result = judge("nccl", fixture_text("nccl/2x8xh100_validation_off_ok.txt"))
    assert result.metrics["wrong"] is None and result.status is Status.PASS


def test_nccl_prefixes_and_noise_do_not_change_the_numbers():
    plain = parse_nccl(fixture_text("nccl/8xh100_full_sweep_ok.txt"))
    srun = parse_nccl(fixture_text("nccl/8xh100_srun_prefix_info_noise_ok.txt"))
    assert len(srun.rows) == len(plain.rows) == 31
    assert parse_nccl(fixture_text("nccl/8xh100_mpirun_tag_output_ok.txt")).avg_busbw_gbps is not None


def test_nccl_multinode_run_is_held_to_the_multinode_floor_not_the_single_node_one():
    result = judge("nccl", fixture_text("nccl/2x8xh100_multinode_ok.txt"), "h100-sxm")
    # 341 GB/s: a failure against the single-node floor (415), a warning against the multi-node one
    assert result.metrics["hosts"] == 2 and result.status is Status.WARN
    assert [f.what for f in result.findings] == [
        "2-node out-of-place busbw at the largest size 341.07 GB/s is below 368 GB/s"
    ]


def test_hpl_nvidia_metrics():
    m = judge("hpl", fixture_text("hpl/nvidia_8xh100_ok.txt"), "h100-sxm").metrics
    assert m["gflops"] == pytest.approx(330100) and m["gflops_per_gpu"] == pytest.approx(41260)
    assert m["residual_passed"] is True and m["ranks"] == 8


def test_hpl_netlib_has_no_per_gpu_figure():
    hpl = parse_hpl(fixture_text("hpl/netlib_cpu_ok.txt"))
    assert not hpl.nvidia and hpl.runs[0].gflops_per_gpu is None and hpl.runs[0].residual_passed


def test_hpl_every_run_counts():
    result = judge("hpl", fixture_text("hpl/netlib_two_runs_failed_fail.txt"))
    assert result.metrics["runs"] == 2 and result.metrics["residual_passed"] is False


def test_dcgm_text_reads_gpu_scopes_and_wrapped_messages():
    diag = parse_dcgm(fixture_text("dcgm/r2_remap_error_and_gpu0_fail_text.txt"))
    memory = [t for t in diag.tests if t.name == "GPU Memory"]
    assert [(t.status, t.gpus) for t in memory] == [("pass", [1, 2, 3, 4, 5, 6, 7]), ("fail", [0])]
    assert "Thermal violations totaling 13.3 seconds started" in memory[1].messages[0].text
    assert diag.node_messages[0].text.endswith("row remappings are pending")


def test_dcgm_findings_name_each_failing_gpu():
    result = judge("dcgm", fixture_text("dcgm/r3_gpu_memory_fail_text.txt"))
    failing = {f.where for f in result.findings if f.severity == "fail"}
    assert {"GPU 0", "GPU 1", "GPU 7"} <= failing
    assert result.metrics["failed_tests"] == ["GPU Memory"] and result.metrics["dcgm_version"] == "3.3.8"


def test_dcgm_2x_naming_and_json_versions():
    assert any(t.name == "Blacklist" for t in parse_dcgm(fixture_text("dcgm/r4_dcgm2_blacklist_text_ok.txt")).tests)
    diag = parse_dcgm(fixture_text("dcgm/r1_json_stray_line_ok.txt"))
    assert diag.version == "3.1.0" and diag.gpu_count == 8


def test_nvidia_smi_csv_and_q_agree_on_identity():
    csv = parse_nvidia_smi(fixture_text("nvidia_smi/csv_8xh100_ok.txt"))
    q = parse_nvidia_smi(fixture_text("nvidia_smi/q_8xh100_ok.txt"))
    assert len(csv.gpus) == len(q.gpus) == 8
    assert csv.gpus[3].power_draw_w == pytest.approx(115.4) and csv.gpus[0].clock_events == ["Idle"]
    assert q.driver_version == "565.57.01" and q.gpus[0].remap_histogram["max"] == 2560
    assert q.gpus[0].pcie_width == q.gpus[0].pcie_width_max == 16


def test_nvidia_smi_metrics_for_the_fleet():
    m = judge("nvidia-smi", fixture_text("nvidia_smi/csv_8xh100_remap_failure_fail.txt"), "h100-sxm").metrics
    assert m["gpu_count"] == 8 and m["remap_failure_gpus"] == [7] and m["vbios_versions"] == ["96.00.99.00.01"]


def test_ibstat_and_ibstatus_ports():
    ports = parse_ibstat(fixture_text("ib/ibstat_h100_ndr_ok.txt"))
    assert ports[0].device == "mlx5_0" and ports[0].rate_gbps == 400 and ports[0].firmware == "28.41.1000"
    status = parse_ibstat(fixture_text("ib/ibstatus_a100_hdr_ok.txt"))
    assert {(p.state, p.physical_state, p.rate_gbps) for p in status} == {("Active", "LinkUp", 200)}


def test_ib_write_bw_units():
    gbits = parse_ib_write_bw(fixture_text("ib/ib_write_bw_ndr_ok.txt"))
    mbytes = parse_ib_write_bw(fixture_text("ib/ib_write_bw_mbsec_ok.txt"))
    assert gbits.rows[-1][2] == pytest.approx(391.12)
    assert mbytes.rows[-1][2] == pytest.approx(391.12, rel=1e-3)


def test_firmware_inventory_components():
    m = judge("firmware", fixture_text("firmware/nvfwupd_table_gb200_ok.txt")).metrics
    assert m["components"]["FW_CPLD_2"] == "0x00 0x10 0x01 0x0f" and m["component_count"] == 32


# ---- values the output does not have are None, never 0 -------------------------------------


def test_csv_without_ecc_columns_reports_no_ecc_value():

    result = judge("nvidia-smi", fixture_text("nvidia_smi/csv_1xa100_no_ecc_columns_ok.txt"))
    assert result.metrics["ecc_uncorrected_volatile"] is None and result.metrics["ecc_corrected_volatile"] is None
    assert any("not checked" in f.what for f in result.findings) and "ECC not reported" in result.reason
    with_ecc = judge("nvidia-smi", fixture_text("nvidia_smi/csv_8xh100_ok.txt"), "h100-sxm")
    assert with_ecc.metrics["ecc_uncorrected_volatile"] == 0 and "not checked" not in with_ecc.reason


def test_section_limited_q_cut_inside_the_last_gpu_is_an_error():

    text = fixture_text("nvidia_smi/q_d_page_retirement_8xh100_ok.txt")
    last_block = text.rindex("GPU 0000")
    for cut in (last_block + 40, len(text) - 60):
        result = judge("nvidia-smi", text[:cut], "h100-sxm")
        assert result.status is Status.ERROR and "cut short" in result.reason


def test_a_pending_page_retirement_fails_in_q_and_csv():
    text = fixture_text("nvidia_smi/q_d_page_retirement_8xh100_ok.txt")
    pending = text.replace("Pending Page Blacklist            : N/A", "Pending Page Blacklist            : Yes", 1)
    result = judge("nvidia-smi", pending, "h100-sxm")
    assert result.status is Status.FAIL and "page retirement pending" in result.reason
    csv_text = "index, name, retired_pages.pending\n0, Tesla V100-SXM2-32GB, Yes\n1, Tesla V100-SXM2-32GB, No\n"
    assert judge("nvidia-smi", csv_text).findings[0].where == "GPU 0"
