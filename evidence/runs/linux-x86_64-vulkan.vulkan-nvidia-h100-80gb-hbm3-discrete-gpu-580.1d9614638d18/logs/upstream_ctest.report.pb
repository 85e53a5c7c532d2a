linux-x86_64-vulkan@4e51488be4b3db34131fcad29533c7b2e5b4d879eb01d11f857ea44705fe0c9f"(0c1e57098bba43ac29e6e3b677cdceebdd22334f*Gsha256:7fb62fceabcdc059b6d19a73081acc387efc5b019b14e620d5fe999ce3e4bf0f2@8be92b2c70635fa27153dbbd07c9cfaa57ef912eb5dc11e495c2209e836612b4:ctest version 4.4.3BctestB
--test-dirB
<work dir>B--output-on-failureB--no-tests=errorB-jB8B	--timeoutB900B-EBû^(test\-arg\-parser|test\-backend\-sampler|test\-download\-model|test\-eval\-callback|test\-eval\-callback\-download\-model|test\-jinja\-py|test\-rpc\-multi\-server|test\-state\-restore\-fragmented|test\-thread\-safety|test\-tokenizers\-ggml\-vocabs)$Rupstream_ctest.ctest.logZ@174730f414e27d7ad8b6020f170291694f01b6681081a59a089998acc5ec5c27b@1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32j,
test-tokenizer-0-bert-bge®Gáz®ç?"mainj-
test-tokenizer-0-command-rš™™™™™ı?"mainj2
test-tokenizer-0-deepseek-coder
×£p=
ç?"mainj0
test-tokenizer-0-deepseek-llm¤p=
×£ğ?"mainj*
test-tokenizer-0-falcon{®Gázì?"mainj+
test-tokenizer-0-gemma-4q=
×£p@"mainj)
test-tokenizer-0-gpt-2=
×£p=ê?"mainj-
test-tokenizer-0-llama-bpe
×£p=
ï?"mainj-
test-tokenizer-0-llama-spmR¸…ëQØ?"mainj'
test-tokenizer-0-mpt\Âõ(\ß?"mainj)
test-tokenizer-0-phi-3ö(\ÂõØ?"mainj)
test-tokenizer-0-qwen2¸…ëQ¸æ?"mainj*
test-tokenizer-0-qwen35=
×£p=ê?"mainj*
test-tokenizer-0-refact®Gáz®×?"mainj-
test-tokenizer-0-starcoder…ëQ¸Õ?"mainjY
test-tokenizers-ggml-vocabs"main*2network: git-clones huggingface.co/ggml-org/vocabsj
test-unicode{®Gáz„?"mainj 
test-samplingÃõ(\Â@"mainj(
test-reasoning-budget{®Gáz„?"mainj&
test-grammar-parser{®Gáz„?"mainj+
test-grammar-integration{®Gáz”?"mainj%
test-llama-grammar{®Gáz„?"mainj#
test-batch-alloc{®Gáz„?"mainj
	test-chat…ëQ¸#@"mainj.
test-json-schema-to-grammar{®Gáz”?"mainj-
test-tokenizer-1-llama-spm¤p=
×£à?"mainj'
test-generate-models=
×£p½*@"mainj0
test-recurrent-state-rollbackÍÌÌÌÌ,M@"mainj'
test-save-load-state)\ÂõU@"mainj'
test-chat-peg-parser¸…ëQ¸®?"mainj

test-jinja333333Ã?"mainjz
test-jinja-py"python*_needs Python's jinja2 as the reference renderer (not a lane dependency, not in the Python lock)j#
test-json-schema{®Gáz„?"mainj(
test-chat-auto-parser=
×£p=ò?"mainj%
test-chat-templateÃõ(\ÂÅ?"mainj
test-log¸…ëQ¸?"mainj"
test-peg-parser{®Gáz´?"mainj]
test-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej
test-thread-safety"main*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejd
test-arg-parser"main*Inetwork: makes HTTP requests to ggml.ai (cannot make GET request offline)j(
test-model-resolutionÂõ(\Ò?"mainj
test-opt®Gáz®@"mainj$
test-tiled-mulmatq=
×£p@"mainj*
test-model-load-cancel
×£p=
ó?"modelj$
test-autoreleaseìQ¸…ëù?"modeljş
test-backend-sampler"model*Üits logit_bias case needs a trained model (needs tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned tree); the embedded random-weight model's logits outweigh the +10 biasj™
test-state-restore-fragmented"model*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treej
test-barrierHáz®G@"mainj$
test-quantize-fns®Gáz®@"mainj%
test-quantize-perfìQ¸…ëÁ?"mainj
	test-ropeáz®GáÚ?"mainj!
test-col2im-1d\Âõ(\ç?"mainj"
test-mtmd-c-api{®Gáz”?"mainj!
test-mtmd-impl{®Gáz¤?"mainjk
!test-eval-callback-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej‡
test-eval-callback*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejÃ
test-rpc-multi-server"main*¡does not link against the installed ggml package (upstream links ggml-rpc by bare name: ld cannot find -lggml-rpc); mixed RPC routes are measured by tools/compatr9/(
9¸…ëQàj@Aq=
×£`X@z“
test-backend-opsbuilt but not a CTest test at the pinned commit; the runner's fixture_parity step runs it on the device against the CPU backend€’2026-12-07T00:46:16Zš2026-12-07T00:47:54Z