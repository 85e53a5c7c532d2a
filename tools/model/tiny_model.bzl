"""tiny_gguf: a deterministic tiny llama GGUF built by //tools/model:make_tiny_model.

Example:
    tiny_gguf(name = "tiny_llama_f16", dtype = "f16")   # -> tiny_llama_f16.gguf
"""

_DEFAULT_VOCAB = "@llama_cpp//:src/models/ggml-vocab-llama-spm.gguf"

def _tiny_gguf_impl(ctx):
    out = ctx.actions.declare_file(ctx.label.name + ".gguf")
    args = ctx.actions.args()
    args.add(ctx.file.vocab, format = "--vocab=%s")
    args.add(out, format = "--out=%s")
    args.add(ctx.attr.dtype, format = "--dtype=%s")
    args.add(str(ctx.attr.seed), format = "--seed=%s")
    for field, value in ctx.attr.shape.items():
        args.add("--{}={}".format(field, value))
    ctx.actions.run(
        executable = ctx.executable._make_tiny_model,
        arguments = [args],
        inputs = [ctx.file.vocab],
        outputs = [out],
        mnemonic = "TinyGguf",
        progress_message = "Writing tiny %s model %s" % (ctx.attr.dtype, out.short_path),
    )
    return [DefaultInfo(
        files = depset([out]),
        runfiles = ctx.runfiles(files = [out]),
    )]

tiny_gguf = rule(
    implementation = _tiny_gguf_impl,
    doc = "Writes <name>.gguf: a 2-layer random llama model with the tokenizer of `vocab`. " +
          "Byte-identical for the same vocab, dtype and seed.",
    attrs = {
        "dtype": attr.string(
            default = "f32",
            values = ["f32", "f16"],
            doc = "Storage type of the 2-D weights; norm weights stay F32.",
        ),
        "seed": attr.int(
            default = 1234,
            doc = "Seed of numpy.random.default_rng for the weights.",
        ),
        "shape": attr.string_dict(
            doc = "Overrides of the tiny shape (n_layer, n_embd, n_head, n_head_kv, n_ff), e.g. for " +
                  "a model large enough to be memory-bandwidth bound.",
        ),
        "vocab": attr.label(
            default = Label(_DEFAULT_VOCAB),
            allow_single_file = [".gguf"],
            doc = "GGUF whose tokenizer.* fields are copied.",
        ),
        "_make_tiny_model": attr.label(
            default = Label("//tools/model:make_tiny_model"),
            executable = True,
            cfg = "exec",
        ),
    },
)
