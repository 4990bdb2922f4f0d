"""Every fixture output, healthy, degraded and failing, judged as an operator would."""

from __future__ import annotations

import json

import pytest

from fleetctl.checks import KINDS, CheckResult, Status, judge
from tests.support.fixtures import FIXTURES, fixture_text

H100, H200, A100 = "h100-sxm", "h200-sxm", "a100-sxm-80gb"
PASS, WARN, FAIL, ERROR = Status.PASS, Status.WARN, Status.FAIL, Status.ERROR

# (fixture, kind, profile, expected status)
CASES = [
    # nccl-tests: header versions, prefixes, validation modes, collectives, deaths and hangs
    ("nccl/8xh100_full_sweep_ok.txt", "nccl", H100, PASS),
    ("nccl/8xh200_218_header_ok.txt", "nccl", H200, PASS),
    ("nccl/8xh100_srun_prefix_info_noise_ok.txt", "nccl", H100, PASS),
    ("nccl/8xh100_mpirun_tag_output_ok.txt", "nccl", H100, PASS),
    # Over several hosts: read without a profile ("_ok": every value right), held to the
    # profile's multi-node floor with one (368 warn, 330 fail on h100-sxm's 8x NDR)
    ("nccl/2x8xh100_validation_off_ok.txt", "nccl", None, PASS),
    (
        "nccl/2x8xh100_validation_off_ok.txt",
        "nccl",
        H100,
        FAIL,
    ),  # nccl-tests#290: 90 GB/s, NVIDIA expects 46-48 per NIC
    ("nccl/2x8xh100_multinode_ok.txt", "nccl", None, PASS),
    ("nccl/2x8xh100_multinode_ok.txt", "nccl", H100, WARN),  # A3 Mega's 8x 200G, not 8x NDR: 341 GB/s
    ("nccl/2x8xh100_a3mega_verbatim_ok.txt", "nccl", H100, WARN),
    ("nccl/4x8xh100_multinode_derived_warn.txt", "nccl", H100, WARN),
    # no host list: its NCCL nranks (32) over h100-sxm's 8 GPUs says 4 nodes, not one
    ("nccl/4x8xh100_nranks_only_no_host_list_warn.txt", "nccl", H100, WARN),
    ("nccl/2x8xh100_multinode_half_fail.txt", "nccl", H100, FAIL),
    ("nccl/8xh100_all_gather_ok.txt", "nccl", H100, PASS),
    ("nccl/a100_old_error_column_ok.txt", "nccl", A100, PASS),
    ("nccl/8xh100_slow_warn.txt", "nccl", H100, WARN),
    ("nccl/8xh100_slow_fail.txt", "nccl", H100, FAIL),
    ("nccl/2node_wrong_gformat_fail.txt", "nccl", None, FAIL),
    ("nccl/a100_old_error_column_oob_fail.txt", "nccl", A100, FAIL),
    ("nccl/dgxh100_hang_with_wrong_fail.txt", "nccl", None, FAIL),
    ("nccl/8xh100_cuda_failure_fail.txt", "nccl", H100, FAIL),
    ("nccl/multinode_nccl_failure_fail.txt", "nccl", None, FAIL),
    ("nccl/8xh100_hung_no_footer_error.txt", "nccl", H100, ERROR),
    # HPL: NVIDIA and netlib layouts, noise, residual verdicts
    ("hpl/nvidia_8xh100_ok.txt", "hpl", H100, PASS),
    ("hpl/nvidia_8xh100_progress_and_nccl_noise_ok.txt", "hpl", H100, PASS),
    ("hpl/nvidia_a100_1gpu_ok.txt", "hpl", A100, PASS),
    ("hpl/netlib_cpu_ok.txt", "hpl", None, PASS),
    ("hpl/nvidia_8xh100_slow_warn.txt", "hpl", H100, WARN),
    ("hpl/nvidia_h100_result_row_only_warn.txt", "hpl", H100, WARN),
    ("hpl/nvidia_8xh100_slow_fail.txt", "hpl", H100, FAIL),
    ("hpl/nvidia_8xh100_residual_failed_fail.txt", "hpl", H100, FAIL),
    ("hpl/netlib_two_runs_failed_fail.txt", "hpl", None, FAIL),
    ("hpl/intel_residual_failed_fail.txt", "hpl", None, FAIL),
    # dcgmi health -c: the background watches' report (checks/dcgm_health.py)
    ("dcgm_health/healthy.txt", "dcgm-health", None, PASS),
    ("dcgm_health/gpu0_memory_warn.txt", "dcgm-health", None, WARN),
    ("dcgm_health/gpu1_memory_fail_sm_warn.txt", "dcgm-health", None, FAIL),
    ("dcgm_health/watches_not_enabled_error.txt", "dcgm-health", None, ERROR),
    # dcgmi diag: text (2.x and 3.x naming, both dividers, wrapped rows) and JSON
    ("dcgm/r2_a100_text_ok.txt", "dcgm", A100, PASS),
    ("dcgm/r2_h100_text_ok.txt", "dcgm", H100, PASS),
    ("dcgm/r4_dcgm2_blacklist_text_ok.txt", "dcgm", None, PASS),
    ("dcgm/r1_json_ok.txt", "dcgm", H100, PASS),
    ("dcgm/r1_json_stray_line_ok.txt", "dcgm", None, PASS),
    ("dcgm/r2_gpu3_warn_text.txt", "dcgm", None, WARN),
    ("dcgm/r3_json_gpu5_warn_stress_skipped_error.txt", "dcgm", None, ERROR),  # Targeted Stress: Skip
    ("dcgm/r2_pcie_fail_text.txt", "dcgm", None, FAIL),
    ("dcgm/r3_gpu_memory_fail_text.txt", "dcgm", None, FAIL),
    ("dcgm/r2_remap_error_and_gpu0_fail_text.txt", "dcgm", None, FAIL),
    ("dcgm/r3_json_gpu5_fail.txt", "dcgm", None, FAIL),
    ("dcgm/r2_cut_short_error.txt", "dcgm", None, ERROR),
    ("dcgm/r3_json_cut_error.txt", "dcgm", None, ERROR),
    # DCGM 4.x: a row per GPU in the text table; metadata, entity groups, test_summary in JSON
    ("dcgm/r3_dcgm40_text_4gpu_ok.txt", "dcgm", None, PASS),
    ("dcgm/r3_dcgm4_json_diagnostic_8gpu_ok.txt", "dcgm", H100, PASS),
    ("dcgm/r2_dcgm441_text_pcie_internal_error_fail.txt", "dcgm", None, FAIL),
    ("dcgm/r1_dcgm423_json_gb10_persistence_fail.txt", "dcgm", None, FAIL),
    # a diagnostic that tested nothing is not a pass
    ("dcgm/r3_dcgm442_text_all_skipped_error.txt", "dcgm", None, ERROR),
    # nvidia-smi: CSV query and -q
    ("nvidia_smi/csv_8xh100_ok.txt", "nvidia-smi", H100, PASS),
    # GB200 NVL72 compute trays: each GPU registered with its multi-node NVLink domain
    ("nvidia_smi/q_gb200_tray_fabric_ok.txt", "nvidia-smi", "gb200", PASS),
    ("nvidia_smi/q_gb200_fabric_insufficient_resources_fail.txt", "nvidia-smi", "gb200", FAIL),
    ("nvidia_smi/q_gb200_fabric_unhealthy_fail.txt", "nvidia-smi", "gb200", FAIL),
    ("nvidia_smi/q_gb200_fabric_in_progress_fail.txt", "nvidia-smi", "gb200", FAIL),
    ("imex/imex_ctl_18_nodes_up_ok.txt", "imex", "gb200", PASS),
    ("imex/imex_ctl_node7_unavailable_down_fail.txt", "imex", "gb200", FAIL),
    ("nvidia_smi/csv_1xh100_250_fields_ok.txt", "nvidia-smi", None, PASS),
    ("nvidia_smi/q_8xh100_ok.txt", "nvidia-smi", H100, PASS),
    ("nvidia_smi/q_rtx4090_power_cap_ok.txt", "nvidia-smi", None, PASS),
    ("nvidia_smi/csv_1xa100_no_ecc_columns_ok.txt", "nvidia-smi", None, PASS),  # ECC: not checked, said so
    ("nvidia_smi/q_d_page_retirement_8xh100_ok.txt", "nvidia-smi", H100, PASS),  # -q -d: complete output
    ("nvidia_smi/q_d_page_retirement_remap_pending_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/csv_8xh100_hot_warn.txt", "nvidia-smi", H100, WARN),
    ("nvidia_smi/csv_8xh100_sw_thermal_warn.txt", "nvidia-smi", H100, WARN),
    ("nvidia_smi/csv_8xh100_pcie_x8_warn.txt", "nvidia-smi", H100, WARN),
    ("nvidia_smi/q_gh200_lifetime_remap_warn.txt", "nvidia-smi", None, WARN),
    ("nvidia_smi/csv_7xh100_missing_gpu_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/csv_8xa100_wrong_model_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/csv_8xh100_uncorrectable_ecc_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/csv_8xh100_remap_failure_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/csv_8xh100_unknown_error_cell_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/csv_gpu_lost_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/device_handle_only_fail.txt", "nvidia-smi", None, FAIL),
    ("nvidia_smi/q_8xh100_remap_pending_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/q_8xh100_hw_slowdown_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/q_8xh100_dbe_volatile_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/q_8xh100_announced_8_printed_7_error.txt", "nvidia-smi", H100, ERROR),
    # the default table, the form operators paste most: GPU count, ERR!, the ECC column
    ("nvidia_smi/table_8xh100_ok.txt", "nvidia-smi", H100, PASS),
    ("nvidia_smi/table_err_field_fail.txt", "nvidia-smi", None, FAIL),  # ERR!: a GPU NVML cannot read
    ("nvidia_smi/table_7xh100_gpu_missing_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/table_4xa100_sxm4_on_8gpu_profile_fail.txt", "nvidia-smi", A100, FAIL),
    ("nvidia_smi/table_4xa100_sxm4_on_8gpu_profile_fail.txt", "nvidia-smi", None, PASS),
    ("nvidia_smi/table_8xh100_cut_after_gpu3_error.txt", "nvidia-smi", H100, ERROR),  # cut: not 4 GPUs missing
    ("nvidia_smi/no_devices_found_fail.txt", "nvidia-smi", H100, FAIL),
    ("nvidia_smi/no_devices_found_fail.txt", "nvidia-smi", None, FAIL),
    # kernel log XIDs
    ("xid/dmesg_no_xid_ok.txt", "xid", None, PASS),
    ("xid/dmesg_T_xid13_app_only_ok.txt", "xid", None, PASS),
    ("xid/xid63_remap_ignored_ok.txt", "xid", None, PASS),  # NVIDIA: IGNORE, IGNORE
    ("xid/dmesg_unknown_code_warn.txt", "xid", None, WARN),
    ("xid/dmesg_T_xid13_and_109_fail.txt", "xid", None, FAIL),
    ("xid/journal_xid79_nvlink_fail.txt", "xid", H100, FAIL),
    ("xid/dmesg_T_xid119_gsp_fail.txt", "xid", None, FAIL),
    ("xid/journal_iso_xid48_dbe_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_xid32_38_44_catalogued_warn.txt", "xid", None, WARN),
    ("xid/dmesg_xid45_solo_warn.txt", "xid", None, WARN),
    ("xid/dmesg_nvswitch_sxid_nonfatal_warn.txt", "xid", None, WARN),
    # GPU failures without an Xid line, and the other kernel-log formats
    ("xid/journal_fallen_off_bus_no_xid_line_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_T_gsp_reset_required_fail.txt", "xid", None, FAIL),
    ("xid/journal_gsp_timeout_banner_no_xid_line_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_nvswitch_sxid_fatal_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_nvlink_rx_detect_failure_fail.txt", "xid", None, FAIL),
    ("xid/kmsg_raw_xid79_fail.txt", "xid", None, FAIL),
    ("xid/journal_json_xid79_burst_45_fail.txt", "xid", None, FAIL),
    # GPUs that never initialised, and Fabric Manager's NVSwitch reports: no Xid line at all
    ("xid/journal_rminitadapter_repeated_no_xid_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_cannot_attach_gpu_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_gsp_firmware_init_fail.txt", "xid", None, FAIL),
    ("xid/fabricmanager_log_sxid_fatal_fail.txt", "xid", None, FAIL),
    ("xid/fabricmanager_log_sxid_nonfatal_warn.txt", "xid", None, WARN),
    ("xid/fabricmanager_topology_mismatch_fail.txt", "xid", None, FAIL),
    # the host's hardware in the kernel log (passive signals of the host checks)
    ("xid/dmesg_host_mce_edac_aer_throttle_warn.txt", "xid", None, WARN),
    ("xid/dmesg_T_mlx5_fabric_fail.txt", "xid", None, FAIL),
    ("xid/dmesg_nfs_hang_readonly_fail.txt", "xid", None, FAIL),
    # storage (checks/storage.py): nvme smart-log, text and JSON
    ("storage/nvme_smart_log_text_ok.txt", "nvme", None, PASS),
    ("storage/nvme_smart_log_json_ok.txt", "nvme", None, PASS),
    ("storage/nvme_smart_log_json_degraded_fail.txt", "nvme", None, FAIL),
    ("storage/nvme_transcript_two_drives_ok.txt", "nvme", None, PASS),
    # the chassis from its BMC (checks/chassis.py): Redfish logs and sensors
    ("chassis/redfish_ocp_sel_temperature_fail.txt", "bmc-log", None, FAIL),
    ("chassis/redfish_cisco_ucs_power_thermal_ok.txt", "bmc-sensors", None, PASS),
    ("xid/dmesg_edac_ue_aer_fatal_fail.txt", "xid", None, FAIL),
    # the host (checks/host.py): PCIe, memory, CPUs, filesystems, daemons, versions, clock
    ("host/lspci_vv_8xh100_cx7_ok.txt", "pcie", H100, PASS),
    ("host/lspci_vv_idle_gpu_gen1_ok.txt", "pcie", None, PASS),  # an idle GPU's Gen1 speed is power saving
    ("host/lspci_vv_8xh100_gpu_x8_fail.txt", "pcie", H100, FAIL),
    ("host/lspci_vv_7xh100_gpu_missing_fail.txt", "pcie", H100, FAIL),
    ("host/lspci_vv_not_root_error.txt", "pcie", H100, ERROR),
    ("host/aer_two_gpus_ok.txt", "pcie-aer", H100, PASS),
    ("host/aer_surprise_down_fatal_fail.txt", "pcie-aer", H100, FAIL),
    ("host/memory_2tb_edac_clean_ok.txt", "memory", H100, PASS),
    ("host/memory_no_edac_warn.txt", "memory", H100, WARN),
    ("host/memory_edac_uncorrected_fail.txt", "memory", H100, FAIL),
    ("host/memory_dimms_missing_fail.txt", "memory", H100, FAIL),
    ("host/lscpu_epyc7742_all_online_ok.txt", "cpu", A100, PASS),
    ("host/lscpu_epyc7742_one_offline_fail.txt", "cpu", A100, FAIL),
    ("host/lscpu_epyc8434p_96_online_ok.txt", "cpu", H100, PASS),  # none offline; a DGX's 224 is no requirement
    ("host/disk_dgx_lustre_ok.txt", "disk", H100, PASS),
    ("host/disk_raid_inodes_warn.txt", "disk", H100, WARN),
    ("host/disk_root_full_fail.txt", "disk", H100, FAIL),
    ("host/disk_raid_read_only_fail.txt", "disk", H100, FAIL),
    (
        "host/disk_lustre_missing_fail.txt",
        "disk",
        H100,
        PASS,
    ),  # h100-sxm requires no mount; a site profile does (test_host_checks)
    ("host/services_hgx_h100_ok.txt", "services", H100, PASS),
    ("host/services_fabricmanager_failed_fail.txt", "services", H100, FAIL),
    ("host/versions_550_ok.txt", "versions", H100, PASS),
    ("host/versions_library_mismatch_fail.txt", "versions", H100, FAIL),
    (
        "host/versions_off_baseline_kernel_warn.txt",
        "versions",
        H100,
        PASS,
    ),  # no baseline in h100-sxm; a site profile's (test_host_checks)
    # the host tools' other common forms: judged where they show the fault, else refused naming the form needed
    ("host/df_h_dgx1_root_full_fail.txt", "disk", H100, FAIL),
    ("host/df_h_azure_hpc_no_fault_error.txt", "disk", H100, ERROR),
    ("host/lspci_nn_8xa100_no_link_status_error.txt", "pcie", A100, ERROR),
    ("host/lspci_nn_8xa100_gpu_rev_ff_fail.txt", "pcie", A100, FAIL),
    ("host/services_status_fabricmanager_failed_fail.txt", "services", H100, FAIL),
    (
        "host/services_status_fabricmanager_failed_fail.txt",
        "services",
        None,
        ERROR,
    ),  # nothing required without a profile
    ("host/services_status_all_active_error.txt", "services", H100, ERROR),
    ("host/chrony_aws_synced_ok.txt", "clock", H100, PASS),
    ("host/chrony_1557s_slow_fail.txt", "clock", H100, FAIL),
    ("host/chrony_not_synchronised_fail.txt", "clock", H100, FAIL),
    # InfiniBand
    ("ib/ibstat_h100_ndr_ok.txt", "ib", H100, PASS),
    ("ib/ibstat_h100_8rails_3eth_down_ok.txt", "ib", H100, PASS),  # unused Ethernet ports are not rails
    ("ib/ibstat_h100_8rails_3eth_down_ok.txt", "ib", None, PASS),
    ("ib/ibstat_h100_8rails_bluefield_bond_ok.txt", "ib", H100, PASS),
    ("ib/ibstatus_a100_hdr_ok.txt", "ib", A100, PASS),
    ("ib/ib_write_bw_ndr_ok.txt", "ib", H100, PASS),
    ("ib/ib_write_bw_mbsec_ok.txt", "ib", H100, PASS),
    ("ib/ib_write_bw_ndr_slow_warn.txt", "ib", H100, WARN),
    ("ib/ibstat_one_port_hdr_rate_fail.txt", "ib", H100, FAIL),
    ("ib/ibstat_polling_fail.txt", "ib", None, FAIL),
    ("ib/ibstatus_a100_hdr_ok.txt", "ib", H100, FAIL),  # HDR ports on an NDR profile
    ("ib/ib_write_bw_ndr_slow_fail.txt", "ib", H100, FAIL),
    ("ib/ib_write_bw_rdma_cm_rejected_fail.txt", "ib", None, FAIL),
    ("ib/ib_write_bw_create_qp_fail.txt", "ib", None, FAIL),
    ("ib/ib_write_bw_cut_error.txt", "ib", H100, ERROR),
    # ibv_devinfo -v: the same judgement as ibstat; plain ibv_devinfo prints no physical state or rate
    ("ib/ibv_devinfo_vv_hdr_active_ok.txt", "ib", None, PASS),
    ("ib/ibv_devinfo_vv_hdr_one_disabled_fail.txt", "ib", None, FAIL),
    ("ib/ibv_devinfo_plain_mlx4_no_rate_error.txt", "ib", None, ERROR),
    # a RoCE host: no packaged profile has its rails (tests/checks/test_site_profiles.py judges it with a site one)
    ("ib/ibstat_roce_400g_ok.txt", "ib", None, PASS),
    # under an InfiniBand profile, a host with no InfiniBand port is judged on its RoCE rails
    ("ib/ibstat_roce_400g_ok.txt", "ib", H100, FAIL),  # one 400 GbE rail (and one at 100), h100-sxm needs 8
    ("ib/ibstat_roce_400g_rail_down_fail.txt", "ib", None, FAIL),
    ("ib/ibstat_roce_400g_rail_down_fail.txt", "ib", H100, FAIL),
    ("ib/ibstat_roce_2x100g_connectx6dx_on_ndr_profile_fail.txt", "ib", H100, FAIL),
    ("ib/ibstat_roce_2x100g_connectx6dx_on_ndr_profile_fail.txt", "ib", None, PASS),
    # firmware inventories
    ("firmware/nvidia_smi_vbios_ok.txt", "firmware", None, PASS),
    ("firmware/flint_query_cx7_ok.txt", "firmware", None, PASS),
    ("firmware/nvfwupd_table_gb200_ok.txt", "firmware", None, PASS),
    ("firmware/nvfwupd_json_dgxh100_ok.txt", "firmware", None, PASS),
    ("firmware/redfish_members_ok.txt", "firmware", None, PASS),
    ("firmware/redfish_expanded_ok.txt", "firmware", None, PASS),
    ("firmware/nvidia_smi_vbios_mixed_warn.txt", "firmware", None, WARN),
    ("firmware/mlxup_update_required_warn.txt", "firmware", None, WARN),
    ("firmware/nvfwupd_json_mixed_gpu_warn.txt", "firmware", None, WARN),
    ("firmware/redfish_expanded_critical_fail.txt", "firmware", None, FAIL),
    ("firmware/redfish_collection_only_error.txt", "firmware", None, ERROR),
]


@pytest.mark.parametrize(("name", "kind", "profile", "expected"), CASES, ids=[c[0] for c in CASES])
def test_fixture_is_judged(name, kind, profile, expected):
    result = judge(kind, fixture_text(name), profile)
    assert result.status is expected, result.reason
    assert result.reason and "\n" not in result.reason
    if expected in (FAIL, WARN):
        assert any(f.severity == expected.value for f in result.findings)
    assert CheckResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_every_fixture_is_in_the_table():
    listed = {c[0] for c in CASES}
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.rglob("*.txt")}
    assert on_disk <= listed


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "text", ["", "   \n", "hello world\n", "{}", "\x00\x01garbage", "<html><body>502 Bad Gateway</body></html>"]
)
def test_empty_or_foreign_text_is_an_error(kind, text):
    result = judge(kind, text)
    assert result.status is Status.ERROR
    assert result.reason


@pytest.mark.parametrize(
    ("fixture_a", "kind_a", "kind_b"),
    [
        ("nccl/8xh100_full_sweep_ok.txt", "nccl", "hpl"),
        ("hpl/nvidia_8xh100_ok.txt", "hpl", "nccl"),
        ("ib/ibstat_h100_ndr_ok.txt", "ib", "dcgm"),
        ("dcgm/r1_json_ok.txt", "dcgm", "nvidia-smi"),
        ("nvidia_smi/q_8xh100_ok.txt", "nvidia-smi", "ib"),
        ("firmware/flint_query_cx7_ok.txt", "firmware", "nccl"),
    ],
)
def test_one_tools_output_judged_as_another_is_an_error(fixture_a, kind_a, kind_b):
    text = fixture_text(fixture_a)
    assert judge(kind_a, text).status is Status.PASS
    assert judge(kind_b, text).status is Status.ERROR


def test_unknown_kind_and_profile_raise():
    from fleetctl.checks import UnknownProfile

    with pytest.raises(ValueError, match="unknown check kind"):
        judge("bogus", "x")
    with pytest.raises(UnknownProfile, match="known profiles"):
        judge("nccl", "x", "h900")
