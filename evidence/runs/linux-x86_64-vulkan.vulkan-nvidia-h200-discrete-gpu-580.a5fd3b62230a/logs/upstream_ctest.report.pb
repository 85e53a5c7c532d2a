linux-x86_64-vulkan@5232cc015ad73f929ad30f78aa1c206412a93d9ff4f840bb62f270f84088a1da"(0c1e57098bba43ac29e6e3b677cdceebdd22334f*Gsha256:7fb62fceabcdc059b6d19a73081acc387efc5b019b14e620d5fe999ce3e4bf0f2@8be92b2c70635fa27153dbbd07c9cfaa57ef912eb5dc11e495c2209e836612b4:ctest version 4.4.3BctestB
--test-dirB
<work dir>B--output-on-failureB--no-tests=errorB-jB8B	--timeoutB900B-EBû^(test\-arg\-parser|test\-backend\-sampler|test\-download\-model|test\-eval\-callback|test\-eval\-callback\-download\-model|test\-jinja\-py|test\-rpc\-multi\-server|test\-state\-restore\-fragmented|test\-thread\-safety|test\-tokenizers\-ggml\-vocabs)$Rupstream_ctest.ctest.logZ@0d1444d7c2f4151cbaf02a71cf32cf50a52b5df0d3fa1260991915664c443276b@a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818j,
test-tokenizer-0-bert-bgeö(\Âõà?"mainj-
test-tokenizer-0-command-r¸…ëQ¸ò?"mainj2
test-tokenizer-0-deepseek-coderš™™™™™á?"mainj0
test-tokenizer-0-deepseek-llm®Gáz®ç?"mainj*
test-tokenizer-0-falcon
×£p=
ç?"mainj+
test-tokenizer-0-gemma-4q=
×£pı?"mainj)
test-tokenizer-0-gpt-2š™™™™™á?"mainj-
test-tokenizer-0-llama-bpeÍÌÌÌÌÌì?"mainj-
test-tokenizer-0-llama-spm…ëQ¸Õ?"mainj'
test-tokenizer-0-mpt…ëQ¸Õ?"mainj)
test-tokenizer-0-phi-3¤p=
×£Ğ?"mainj)
test-tokenizer-0-qwen2ffffffæ?"mainj*
test-tokenizer-0-qwen35\Âõ(\ß?"mainj*
test-tokenizer-0-refact×£p=
×Ó?"mainj-
test-tokenizer-0-starcoderáz®GáÊ?"mainjY
test-tokenizers-ggml-vocabs"main*2network: git-clones huggingface.co/ggml-org/vocabsj
test-unicode{®Gáz„?"mainj 
test-sampling\Âõ(\@"mainj(
test-reasoning-budget{®Gáz„?"mainj&
test-grammar-parser{®Gáz„?"mainj+
test-grammar-integration{®Gáz„?"mainj%
test-llama-grammar{®Gáz„?"mainj#
test-batch-alloc{®Gáz„?"mainj
	test-chatÂõ(\@"mainj.
test-json-schema-to-grammar{®Gáz„?"mainj-
test-tokenizer-1-llama-spmö(\ÂõØ?"mainj'
test-generate-models=
×£p½#@"mainj0
test-recurrent-state-rollback)\ÂõèC@"mainj'
test-save-load-stateš™™™™ùN@"mainj'
test-chat-peg-parser¸…ëQ¸®?"mainj

test-jinja¸…ëQ¸¾?"mainjz
test-jinja-py"python*_needs Python's jinja2 as the reference renderer (not a lane dependency, not in the Python lock)j#
test-json-schema{®Gáz„?"mainj(
test-chat-auto-parserÃõ(\Âå?"mainj%
test-chat-template
×£p=
Ç?"mainj
test-log{®Gáz”?"mainj"
test-peg-parser¸…ëQ¸?"mainj]
test-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej
test-thread-safety"main*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejd
test-arg-parser"main*Inetwork: makes HTTP requests to ggml.ai (cannot make GET request offline)j(
test-model-resolution¤p=
×£À?"mainj
test-optR¸…ëQ@"mainj$
test-tiled-mulmatR¸…ëQ@"mainj*
test-model-load-cancelÍÌÌÌÌÌô?"modelj$
test-autorelease¸…ëQ¸ò?"modeljş
test-backend-sampler"model*Üits logit_bias case needs a trained model (needs tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned tree); the embedded random-weight model's logits outweigh the +10 biasj™
test-state-restore-fragmented"model*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treej
test-barrier×£p=
×@"mainj$
test-quantize-fns)\Âõ(@"mainj%
test-quantize-perfR¸…ëQØ?"mainj
	test-rope{®Gázä?"mainj!
test-col2im-1d=
×£p=ê?"mainj"
test-mtmd-c-api{®Gáz”?"mainj!
test-mtmd-impl{®Gáz”?"mainjk
!test-eval-callback-download-model*Dnetwork: downloads tinyllamas/stories15M-q4_0.gguf from Hugging Facej‡
test-eval-callback*oneeds tinyllamas/stories15M-q4_0.gguf, which only test-download-model fetches (network); not in the pinned treejÃ
test-rpc-multi-server"main*¡does not link against the installed ggml package (upstream links ggml-rpc by bare name: ld cannot find -lggml-rpc); mixed RPC routes are measured by tools/compatr9/(
9)\Âõèc@A®GázôQ@z“
test-backend-opsbuilt but not a CTest test at the pinned commit; the runner's fixture_parity step runs it on the device against the CPU backend€’2026-12-06T20:51:09Zš2026-12-06T20:52:21Z