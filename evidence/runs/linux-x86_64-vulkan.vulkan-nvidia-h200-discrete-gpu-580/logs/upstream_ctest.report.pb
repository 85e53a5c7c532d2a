linux-x86_64-vulkan@edc1d6c6c60504076f7107bc54fd9d9d87dab9ad6378ea41a5408b4738d06fc6"(0c1e57098bba43ac29e6e3b677cdceebdd22334f*Gsha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b2@a8ffcce2742c15d9bb64a3ee073fc14056d743f49c1b9ebdea3de6b3962f44f8:ctest version 4.4.3BctestB
--test-dirB
<work dir>B--output-on-failureB--no-tests=errorB-jB8B	--timeoutB900B-EBû^(test\-arg\-parser|test\-backend\-sampler|test\-download\-model|test\-eval\-callback|test\-eval\-callback\-download\-model|test\-jinja\-py|test\-rpc\-multi\-server|test\-state\-restore\-fragmented|test\-thread\-safety|test\-tokenizers\-ggml\-vocabs)$Rupstream_ctest.ctest.logZ@29727ab00f0f29e8a360a043a2fc6c117ba7f1a9886dac7cd19853debab8ddbdb@594f903a937349e4ae25ed5013a4491a9b5aec3344509ccf2b81d50eb0707a85j,
test-tokenizer-0-bert-bge\Âõ(\ß?"mainj-
test-tokenizer-0-command-rö(\Âõğ?"mainj2
test-tokenizer-0-deepseek-coder\Âõ(\ß?"mainj0
test-tokenizer-0-deepseek-llmq=
×£på?"mainj*
test-tokenizer-0-falconÍÌÌÌÌÌä?"mainj+
test-tokenizer-0-gemma-4Ház®Gù?"mainj)
test-tokenizer-0-gpt-2áz®Gáâ?"mainj-
test-tokenizer-0-llama-bpe®Gáz®ç?"mainj-
test-tokenizer-0-llama-spm333333Ó?"mainj'
test-tokenizer-0-mpt333333Ó?"mainj)
test-tokenizer-0-phi-3áz®GáÊ?"mainj)
test-tokenizer-0-qwen2)\Âõ(ä?"mainj*
test-tokenizer-0-qwen35q=
×£pİ?"mainj*
test-tokenizer-0-refactš™™™™™É?"mainj-
test-tokenizer-0-starcoderš™™™™™É?"mainjY
test-tokenizers-ggml-vocabs"main*2network: git-clones huggingface.co/ggml-org/vocabsj
test-unicode"mainj 
test-samplingö(\Âõ@"mainj
test-reasoning-budget"mainj
test-grammar-parser"mainj+
test-grammar-integration{®Gáz”?"mainj
test-llama-grammar"mainj
test-batch-alloc"mainj
	test-chatÂõ(\@"mainj.
test-json-schema-to-grammar{®Gáz„?"mainj-
test-tokenizer-1-llama-spm…ëQ¸Õ?"mainj'
test-generate-models\Âõ(\!@"mainj0
test-recurrent-state-rollback¸…ëQ8A@"mainj'
test-save-load-state¤p=
×L@"mainj'
test-chat-peg-parser¸…ëQ¸®?"mainj

test-jinja333333Ã?"mainjz
test-jinja-py"python*_needs Python's jinja2 as the reference renderer (not a lane dependency, not in the Python lock)j
test-json-schema"mainj(
test-chat-auto-parser…ëQ¸…ë?"mainj%
test-chat-templateÃõ(\ÂÅ?"mainj
test-log{®Gáz„?"mainj"
test-peg-parser¸…ëQ¸?"mainj]
test-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej
test-thread-safety"main*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejd
test-arg-parser"main*Inetwork: makes HTTP requests to ggml.ai (cannot make GET request offline)j(
test-model-resolution
×£p=
·?"mainj
test-optš™™™™™@"mainj$
test-tiled-mulmatÂõ(\@"mainj*
test-model-load-cancel¸…ëQ¸Ş?"modelj$
test-autoreleaseR¸…ëQà?"modeljş
test-backend-sampler"model*Üits logit_bias case needs a trained model (needs tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned tree); the embedded random-weight model's logits outweigh the +10 biasj™
test-state-restore-fragmented"model*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treej
test-barrier¸…ëQ¸@"mainj$
test-quantize-fns\Âõ(\@"mainj%
test-quantize-perfHáz®GÑ?"mainj
	test-rope…ëQ¸Õ?"mainj!
test-col2im-1dR¸…ëQô?"mainj"
test-mtmd-c-api{®Gáz„?"mainj!
test-mtmd-impl¸…ëQ¸?"mainjk
!test-eval-callback-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej‡
test-eval-callback*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejÃ
test-rpc-multi-server"main*¡does not link against the installed ggml package (upstream links ggml-rpc by bare name: ld cannot find -lggml-rpc); mixed RPC routes are measured by tools/compatr9/(
9=
×£pÕa@A=
×£p-P@z“
test-backend-opsbuilt but not a CTest test at the pinned commit; the runner's fixture_parity step runs it on the device against the CPU backend€’2026-12-01T00:14:09Zš2026-12-01T00:15:13Z