linux-x86_64-cuda@d1947a58afae696854759bb82097bf49bb31c84149bd3805d4806afdc749d850"(0c1e57098bba43ac29e6e3b677cdceebdd22334f*Gsha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b2@a4627069a761d23e0718023ed431401a5f27a760b7fa16826e66e40a49d1605c:ctest version 4.4.3BctestB
--test-dirB
<work dir>B--output-on-failureB--no-tests=errorB-jB8B	--timeoutB1500B-EBû^(test\-arg\-parser|test\-backend\-sampler|test\-download\-model|test\-eval\-callback|test\-eval\-callback\-download\-model|test\-jinja\-py|test\-rpc\-multi\-server|test\-state\-restore\-fragmented|test\-thread\-safety|test\-tokenizers\-ggml\-vocabs)$R	ctest.logZ@7fb66516958fe15d0c175288ba2ec5053c8f6eed26fc38c93c9b966830d2ee3ab@594f903a937349e4ae25ed5013a4491a9b5aec3344509ccf2b81d50eb0707a85j,
test-tokenizer-0-bert-bge…ëQ¸õ?"mainj-
test-tokenizer-0-command-r®Gáz®@"mainj2
test-tokenizer-0-deepseek-coder…ëQ¸…ó?"mainj0
test-tokenizer-0-deepseek-llm¤p=
×£ø?"mainj*
test-tokenizer-0-falconáz®Gáö?"mainj+
test-tokenizer-0-gemma-4)\Âõ(@"mainj)
test-tokenizer-0-gpt-2š™™™™™õ?"mainj-
test-tokenizer-0-llama-bpe{®Gázø?"mainj-
test-tokenizer-0-llama-spmffffffî?"mainj'
test-tokenizer-0-mpt\Âõ(\ï?"mainj)
test-tokenizer-0-phi-3®Gáz®ï?"mainj)
test-tokenizer-0-qwen2ìQ¸…ëõ?"mainj*
test-tokenizer-0-qwen35…ëQ¸…ó?"mainj*
test-tokenizer-0-refact)\Âõ(ğ?"mainj-
test-tokenizer-0-starcoder×£p=
×ë?"mainjY
test-tokenizers-ggml-vocabs"main*2network: git-clones huggingface.co/ggml-org/vocabsj
test-unicode{®Gáz´?"mainj 
test-sampling¸…ëQ¸ş?"mainj(
test-reasoning-budget)\Âõ(¼?"mainj&
test-grammar-parserš™™™™™¹?"mainj+
test-grammar-integration¸…ëQ¸¾?"mainj%
test-llama-grammar¸…ëQ¸¾?"mainj#
test-batch-alloc¸…ëQ¸¾?"mainj
	test-chat®Gáz® @"mainj.
test-json-schema-to-grammar¸…ëQ¸¾?"mainj-
test-tokenizer-1-llama-spmìQ¸…ëé?"mainj'
test-generate-models\Âõ(\(@"mainj0
test-recurrent-state-rollback×£p=
×@"mainj'
test-save-load-state×£p=
0@"mainj'
test-chat-peg-parserR¸…ëQÈ?"mainj

test-jinjaš™™™™™É?"mainjz
test-jinja-py"python*_needs Python's jinja2 as the reference renderer (not a lane dependency, not in the Python lock)j#
test-json-schemaš™™™™™¹?"mainj(
test-chat-auto-parserÂõ(\ö?"mainj%
test-chat-templateÂõ(\Ò?"mainj
test-log)\Âõ(¼?"mainj"
test-peg-parser333333Ã?"mainj]
test-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej
test-thread-safety"main*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejd
test-arg-parser"main*Inetwork: makes HTTP requests to ggml.ai (cannot make GET request offline)j(
test-model-resolution¸…ëQ¸Î?"mainj
test-optÂõ(\@"mainj$
test-tiled-mulmat=
×£p=@"mainj*
test-model-load-cancelffffffæ?"modelj$
test-autoreleaseÃõ(\Âå?"modeljş
test-backend-sampler"model*Üits logit_bias case needs a trained model (needs tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned tree); the embedded random-weight model's logits outweigh the +10 biasj™
test-state-restore-fragmented"model*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treej
test-barrier)\Âõ(@"mainj$
test-quantize-fns…ëQ¸…@"mainj%
test-quantize-perf)\Âõ(¼?"mainj
	test-ropeR¸…ëQØ?"mainj!
test-col2im-1d{®Gázô?"mainj"
test-mtmd-c-apiš™™™™™¹?"mainj!
test-mtmd-implš™™™™™¹?"mainjk
!test-eval-callback-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej‡
test-eval-callback*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejÃ
test-rpc-multi-server"main*¡does not link against the installed ggml package (upstream links ggml-rpc by bare name: ld cannot find -lggml-rpc); mixed RPC routes are measured by tools/compatr9/(
9Âõ(\X@A…ëQ¸E<@z“
test-backend-opsbuilt but not a CTest test at the pinned commit; the runner's fixture_parity step runs it on the device against the CPU backend€’2026-11-30T21:16:44Zš2026-11-30T21:17:12Z