"""report.recipe comes from the commands the checks ran, verified by the binaries' own log lines."""

from __future__ import annotations

import sys

import pytest

from tools.runner import recipe

LANE = "/lanes/cuda/bin"
CPU = "/lanes/cpu/bin"


def _logs(tmp_path, offloaded="3/3"):
    (tmp_path / "artifact_integrity.log").write_text(f"$ {LANE}/llama-completion --version\nversion: 1\n# exit 0 after 0.01s\n")
    (tmp_path / "graph_smoke.log").write_text(
        "## kv cache type q8_0\n"
        f"$ {LANE}/llama-completion -m m.gguf -p 'Once upon a time' -ctk q8_0 -ctv q8_0 -fa on -lv 4 -ngl 99\n"
        f"load_tensors: offloaded {offloaded} layers to GPU\nllama_context: n_ctx                 = 256\n"
        "llama_context: n_batch               = 256\nllama_context: n_ubatch              = 256\n"
        "llama_context: n_seq_max             = 1\nllama_context: flash_attn            = enabled\n# exit 0 after 0.30s\n"
        f"$ {LANE}/llama-completion -m m.gguf -ctk f16 -ctv f16 -fa auto -ngl 99\n"
        f"load_tensors: offloaded {offloaded} layers to GPU\nllama_context: flash_attn            = auto\n"
        "resolve_fused_ops: Flash Attention enabled\n# exit 0 after 0.30s\n")
    (tmp_path / "concurrency.server.log").write_text(
        f"load_tensors: offloaded {offloaded} layers to GPU\nllama_context: n_seq_max             = 4\n"
        "llama_context: n_ctx                 = 1024\nllama_context: n_batch               = 1024\n"
        "llama_context: n_ubatch              = 512\nresolve_fused_ops: Flash Attention enabled\n")
    (tmp_path / "concurrency.log").write_text(
        f"$ {LANE}/llama-server -m m.gguf --port 1 -np 4 -c 1024 -ngl 99  (log: concurrency.server.log)\n# llama-server stopped, exit 0\n")
    # The CPU lane's commands in an accelerator run are the oracle, not the recipe.
    (tmp_path / "reference_parity.log").write_text(
        f"$ {CPU}/llama-logits -m m.gguf -fa off -c 8192 -ctk f32\nllama_context: n_ctx = 8192\n# exit 0 after 1s\n"
        f"$ {LANE}/test-backend-ops test -b CUDA0\n# exit 0 after 1s\n")
    return tmp_path


def test_recipe_of_a_full_offload_run(tmp_path):
    r = recipe.recipe_from_logs(_logs(tmp_path), accelerator=True)
    # q8_0 ran only in graph_smoke (a smoke run, no numerical oracle): exercised, not proven.
    assert list(r.kv_cache_types) == ["f16"]
    assert list(r.flash_attention) == ["on"]
    assert r.n_gpu_layers == -1
    assert (r.context_size, r.batch_size, r.ubatch_size, r.parallel_sequences) == (1024, 1024, 512, 4)


def test_partial_offload_is_not_full(tmp_path):
    assert recipe.recipe_from_logs(_logs(tmp_path, offloaded="2/3"), accelerator=True).n_gpu_layers == 2


def test_cpu_lane_offloads_nothing(tmp_path):
    (tmp_path / "artifact_integrity.log").write_text(f"$ {CPU}/llama-completion --version\n# exit 0 after 0.01s\n")
    (tmp_path / "reference_parity.log").write_text(
        f"$ {CPU}/llama-logits -m m.gguf -fa off\nllama_context: n_ctx                 = 256\n# exit 0 after 1s\n")
    r = recipe.recipe_from_logs(tmp_path, accelerator=False)
    assert r.n_gpu_layers == 0 and list(r.flash_attention) == ["off"] and r.context_size == 256


def test_cells_per_slot_come_from_the_runners_argv_and_a_longer_claim_is_refused():
    from proto import runner_report_pb2 as rpb
    from tools.runner import recipe as recipe_lib
    assert recipe_lib._cells_per_slot(["llama-server", "-np", "4", "-c", "1024"]) == 256
    assert recipe_lib._cells_per_slot(["llama-server", "-np", "4", "-c", "1024", "--kv-unified"]) == 1024
    assert recipe_lib._cells_per_slot(["llama-server", "-c", "1024"]) == 0
    assert recipe_lib.sequence_problem(rpb.Recipe(context_per_sequence=256, longest_sequence_tokens=257)) == ""
    assert "no proving step ran a sequence longer than 30" in recipe_lib.sequence_problem(
        rpb.Recipe(context_per_sequence=256, longest_sequence_tokens=30))


def _split_logs(tmp_path, mode="row", split="1,1", server_mode=None):
    """A two-GPU run's proving commands, with llama.cpp's own `using device` lines."""
    (tmp_path / "artifact_integrity.log").write_text(f"$ {LANE}/llama-completion --version\n# exit 0 after 0.01s\n")
    devices = ("llama_model_load_from_file_impl: using device CUDA0 (NVIDIA H200) (0000:00:06.0) - 143000 MiB free\n"
               "llama_model_load_from_file_impl: using device CUDA1 (NVIDIA H200) (0000:00:07.0) - 143000 MiB free\n")
    split_args = f"-ngl 99 -dev CUDA0,CUDA1 -sm {mode} -ts {split}"
    (tmp_path / "reference_parity.log").write_text(
        f"$ {LANE}/llama-logits -m m.gguf -fa off -ctk f32 -ctv f32 {split_args}\n{devices}"
        "load_tensors: offloaded 3/3 layers to GPU\n# exit 0 after 1s\n"
        # reference_parity's one-GPU baseline: not the split the run proves.
        f"$ {LANE}/llama-logits -m m.gguf -fa auto -ngl 99 -dev CUDA0 -sm none\n"
        "load_tensors: offloaded 3/3 layers to GPU\n# exit 0 after 1s\n")
    (tmp_path / "concurrency.server.log").write_text(devices + "load_tensors: offloaded 3/3 layers to GPU\n")
    server_args = split_args if server_mode is None else split_args.replace(f"-sm {mode}", f"-sm {server_mode}")
    (tmp_path / "concurrency.log").write_text(
        f"$ {LANE}/llama-server -m m.gguf --port 1 -np 4 -c 1024 {server_args}  (log: concurrency.server.log)\n"
        "# llama-server stopped, exit 0\n")
    return tmp_path


def test_recipe_of_a_two_gpu_run_names_its_split(tmp_path):
    r = recipe.recipe_from_logs(_split_logs(tmp_path), accelerator=True)
    assert (r.gpu_count, r.split_mode, r.tensor_split) == (2, "row", "1,1")
    assert r.n_gpu_layers == -1


def test_commands_that_disagree_on_the_split_mode_record_both(tmp_path):
    r = recipe.recipe_from_logs(_split_logs(tmp_path, mode="layer", server_mode="row"), accelerator=True)
    assert r.split_mode == "layer,row"  # no route asks for that: admission refuses every route


def test_one_gpu_recipe_has_no_split(tmp_path):
    r = recipe.recipe_from_logs(_logs(tmp_path), accelerator=True)
    assert (r.gpu_count, r.split_mode, r.tensor_split) == (0, "", "")


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-p", "no:cacheprovider"]))
