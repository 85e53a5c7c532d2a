"""Decides whether a route over the given nodes is admissible, writes the decision, exits 0 if routable.

  admission_cli --policy=policy.json --records_dir=records --node=node-a.json --node=node-b.json \\
                --model_sha256=<hex> [--model_shard_sha256=<hex> ...] \\
                [--kv_cache_type=f16] [--flash_attention=auto] [--n_gpu_layers=-1] \\
                [--gpus=2 --split_mode=layer|row --tensor_split=1,1] \\
                [--context_size=4096] [--context_per_sequence=0] [--batch_size=2048] [--ubatch_size=512] [--parallel=1] \\
                --out=decision.json
  admission_cli --policy=policy.json --records_dir=records --route=route.json --out=decision.json
  admission_cli --policy=policy.json --repository_url=https://mirror/lanes-records \
                --tracker_state_dir=~/.cache/lanes-tracker [--bootstrap_root=1.root.json] --route=route.json \
                [--summary_key=tracker.key --summary_out=decision.intoto.dsse.json]

With --repository_url the Tracker refreshes from a TUF record repository (tools/publish) and decides
only from what that refresh verified; --records_dir then adds cached copies, screened the same way
(a revoked or unpublished copy is refused). A refused refresh (rollback, freeze, ...) refuses the
route with that reason. --summary_key signs the decision as an in-toto SLSA verification summary.

The decision JSON (--out) is the authority; the lines printed are a summary for people, with every
name and value from input files escaped (no control characters reach the terminal).

Without --route, the route's recipe is built from the recipe flags, whose defaults are llama.cpp's
(KV cache f16, flash attention auto, all layers offloaded, context 4096, batch 2048, ubatch 512,
one sequence); "auto" flash attention needs both modes proven, since llama.cpp picks either. A
--route file states its own recipe; one without a recipe is refused (scope-recipe-mismatch).

Exit status: 0 routable, 1 refused (reasons in the decision), 2 unusable input (bad flags; policy,
node, route or records directory missing, unreadable, not UTF-8, malformed), 3 internal error.

Flags and exit statuses only; the work is in tools/admission/admission_files.py and admission.py.
"""

from __future__ import annotations

import json
import pathlib
import sys
from collections.abc import Sequence

from absl import flags
from google.protobuf import json_format

from tools.admission import admission, admission_files, decision_summary
from tools.core import atomic_files
from tools.policy import keys, safe_io
from tools.policy.errors import TrustError

EXIT_ROUTABLE, EXIT_REFUSED, EXIT_UNUSABLE_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


def define_flags(fv: flags.FlagValues | None = None) -> flags.FlagValues:
    """Defines the flags on `fv` (a fresh FlagValues by default), so that cli() can run many times in
    one process (the tests of exit statuses do)."""
    fv = fv if fv is not None else flags.FlagValues()
    flags.DEFINE_string("policy", None, "AdmissionPolicy JSON.", flag_values=fv)
    flags.DEFINE_string("records_dir", None, "Directory of *.dsse.json certification and compatibility records.", flag_values=fv)
    flags.DEFINE_multi_string("node", [], "NodeDescription JSON, one per node of the route.", flag_values=fv)
    flags.DEFINE_string("route", "", "RouteRequest JSON (nodes, model, recipe); instead of --node and the model/recipe flags.", flag_values=fv)
    flags.DEFINE_string("model_sha256", "", "sha256 of the model the route serves (of the first split for GGUF splits).", flag_values=fv)
    flags.DEFINE_multi_string("model_shard_sha256", [], "For GGUF splits: every split's sha256, in order.", flag_values=fv)
    flags.DEFINE_string("route_id", "", "Route id recorded in the decision.", flag_values=fv)
    flags.DEFINE_string("repository_url", "", "TUF record repository (http(s):// or file://) to refresh from.", flag_values=fv)
    flags.DEFINE_string("tracker_state_dir", "", "With --repository_url: this Tracker's metadata, target cache and log state.", flag_values=fv)
    flags.DEFINE_string("bootstrap_root", "", "With --repository_url, first use: the repository's 1.root.json, obtained out of band.", flag_values=fv)
    flags.DEFINE_string("summary_key", "", "Sign the decision as a verification summary with this private key.", flag_values=fv)
    flags.DEFINE_string("summary_out", "", "Where the signed summary (DSSE JSON) goes; needs --summary_key.", flag_values=fv)
    flags.DEFINE_string("out", "", "Where to write the AdmissionDecision JSON: the authoritative result.", flag_values=fv)
    flags.DEFINE_multi_string("kv_cache_type", ["f16"], "KV cache type(s) the route uses (llama.cpp -ctk/-ctv).", flag_values=fv)
    flags.DEFINE_enum("flash_attention", "auto", ["on", "off", "auto"], "Flash attention (-fa); auto needs on and off proven.", flag_values=fv)
    flags.DEFINE_integer("n_gpu_layers", -1, "Layers offloaded (-ngl); -1 all, 0 none.", flag_values=fv)
    flags.DEFINE_integer("context_size", 4096, "Context size (-c).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("context_per_sequence", 0, "Cells per sequence (-c over -np without a unified KV cache); "
                         "0: the whole context, which one sequence may fill.", lower_bound=0, flag_values=fv)
    flags.DEFINE_integer("batch_size", 2048, "Logical batch (-b).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("ubatch_size", 512, "Physical batch (-ub).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("parallel", 1, "Concurrent sequences / server slots (-np).", lower_bound=1, flag_values=fv)
    flags.DEFINE_integer("gpus", 1, "GPUs the route's model is split over (1: one GPU).", lower_bound=1, flag_values=fv)
    flags.DEFINE_string("split_mode", "", "--gpus >= 2: llama.cpp --split-mode, layer or row (default layer).", flag_values=fv)
    flags.DEFINE_string("tensor_split", "", "--gpus >= 2: llama.cpp --tensor-split, e.g. 1,1 (default: by free memory).",
                        flag_values=fv)
    return fv


def run(fv: flags.FlagValues, out=sys.stdout, err=sys.stderr) -> int:
    """Decides from parsed flags; returns the exit status (never raises for bad input)."""
    if not fv.policy or not (fv.records_dir or fv.repository_url):
        print("usage: --policy and --records_dir (or --repository_url) are required", file=err)
        return EXIT_UNUSABLE_INPUT
    if fv.repository_url and not fv.tracker_state_dir:
        print("usage: --repository_url needs --tracker_state_dir", file=err)
        return EXIT_UNUSABLE_INPUT
    if bool(fv.summary_key) != bool(fv.summary_out):
        print("usage: --summary_key and --summary_out go together", file=err)
        return EXIT_UNUSABLE_INPUT
    if fv.route and (fv.node or fv.model_sha256 or fv.model_shard_sha256):
        print("usage: give either --route or --node/--model_sha256, not both", file=err)
        return EXIT_UNUSABLE_INPUT
    recipe = admission_files.recipe_from_flags(fv.kv_cache_type, fv.flash_attention, fv.n_gpu_layers, fv.context_size,
                               fv.batch_size, fv.ubatch_size, fv.parallel, fv.context_per_sequence,
                               fv.gpus, fv.split_mode, fv.tensor_split)
    try:
        if fv.repository_url:
            decision, route, view = admission_files.decide_from_repository(
                fv.policy, fv.repository_url, fv.tracker_state_dir, fv.bootstrap_root or None, fv.node, fv.model_sha256,
                fv.route_id, recipe, fv.model_shard_sha256, fv.route or None, fv.records_dir or None)
        else:
            decision, _ = admission_files.decide_from_files(fv.policy, fv.records_dir, fv.node, fv.model_sha256,
                                                            fv.route_id, recipe, fv.model_shard_sha256, fv.route or None)
            route, view = None, None
        if fv.summary_key:
            if route is None:
                route = admission.route_from_nodes([admission_files.load_node(p) for p in fv.node], fv.model_sha256,
                                                   fv.route_id, recipe, fv.model_shard_sha256) if not fv.route else \
                    admission_files.load_route(fv.route)
            envelope = decision_summary.sign(decision_summary.statement(decision, route, view),
                                             keys.load_private_key(fv.summary_key))
            atomic_files.write_text_atomic(fv.summary_out, json.dumps(envelope, sort_keys=True, indent=2) + "\n")
    except TrustError as error:
        print(f"unusable input: {error.code}: {safe_io.escape(error)}", file=err)
        return EXIT_UNUSABLE_INPUT
    text = json_format.MessageToJson(decision, preserving_proto_field_name=True, sort_keys=True) + "\n"
    if fv.out:
        try:
            pathlib.Path(fv.out).write_text(text)
        except OSError as error:
            print(f"unusable input: cannot write --out {safe_io.escape(fv.out)} ({error.strerror})", file=err)
            return EXIT_UNUSABLE_INPUT
    out.write(admission_files.render(decision))
    return EXIT_ROUTABLE if decision.routable else EXIT_REFUSED


def cli(argv: Sequence[str], out=sys.stdout, err=sys.stderr) -> int:
    """Parses argv (argv[0] is the program) and runs; any unexpected exception is exit 3 with one
    line, so a crash never reads as a refusal."""
    try:
        fv = define_flags()
        if any(a in ("--help", "-h", "--helpfull") for a in argv[1:]):
            out.write(__doc__ + "\n" + fv.get_help() + "\n")
            return EXIT_ROUTABLE
        try:
            rest = fv(list(argv))
        except flags.Error as error:
            print(f"usage: {safe_io.escape(error)}", file=err)
            return EXIT_UNUSABLE_INPUT
        if len(rest) > 1:
            print(f"usage: unexpected arguments {safe_io.escape(rest[1:])}", file=err)
            return EXIT_UNUSABLE_INPUT
        return run(fv, out, err)
    except Exception as error:  # noqa: BLE001 - the one place that turns a bug into exit 3
        print(f"internal-error: {type(error).__name__}: {safe_io.escape(error)} (a bug in admission, not a refusal)", file=err)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(cli(sys.argv))
