linux-x86_64-cpu*ª
#pypi-sdist:llama-cpp-python==0.3.36@832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e(0c1e57098bba43ac29e6e3b677cdceebdd22334f"(llama_cpp_python-0.3.36/vendor/llama.cpp2d
 0001-build-info-lane-stamp.patch@b3e0eeebb13d2b057b731ca5298e7d09357307f45ea4b7a7eebccc85a4c04e382`
0002-llama-logits-tool.patch@796f5035b50c730405c5c1f53526c867d8e339a0d3dc9176680bc0dd3b28b7552h
$0003-ggml-standalone-pkgconfig.patch@780518e19eae5f15764db45bed306faf8f3637130390b43d4cd66a5ede7564bb2f
"0004-ggml-vulkan-old-headers.patch@a2afa6aa675b96c236f30e7f7e4f02656024db3b058f2067ac136d59ea61fd842p
,0005-ggml-amx-full-tile-config-operand.patch@a70d60b172aa498d31b717acb5acd68437b75ba87c67206945f4393df6da7ac6:Gsha256:a9686d04f165328063f911c95975d68f80323ab83af19cf1b843ea03984795c4Bu
host-cc%c++ (Debian 12.2.0-14+deb12u1) 12.2.0/usr/bin/c++*local2
cmakecmake version 3.25.12
ninja1.11.1J
CGNU12.2.0"/usr/bin/gccJ 
CXXGNU12.2.0"/usr/bin/gccR∞

cpu_ggml
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON6
CMAKE_CXX_FLAGS#-ffile-prefix-map=$EXT_BUILD_ROOT=.4
CMAKE_C_FLAGS#-ffile-prefix-map=$EXT_BUILD_ROOT=.
CMAKE_INSTALL_LIBDIRlib
CMAKE_INSTALL_RPATH\$ORIGIN
GGML_BACKEND_DLON
GGML_BUILD_COMMIT0c1e570
GGML_BUILD_EXAMPLESOFF
GGML_BUILD_TESTSOFF
GGML_CPU_ALL_VARIANTSON
GGML_LLAMAFILEON
GGML_NATIVEOFF"«
	configurecmake-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGIN-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_BACKEND_DL=ON-DGGML_CPU_ALL_VARIANTS=ON-DGGML_NATIVE=OFF-DGGML_LLAMAFILE=ON-DGGML_BUILD_COMMIT=0c1e570s-DCMAKE_TOOLCHAIN_FILE=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml.build_tmpdir/crosstool_bazel.cmakeP-DCMAKE_INSTALL_PREFIX=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml\-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml.ext_build_deps-DCMAKE_RANLIB=-GNinja+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml¡ °E∂Û@"E
buildcmake--build.--configRelease
--parallel2jºtìjÅ@":
installcmake	--install.--configReleaseâA`Â–"ª?*cmake version 3.25.121.11.18RàG
	cpu_llama
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON6
CMAKE_CXX_FLAGS#-ffile-prefix-map=$EXT_BUILD_ROOT=.4
CMAKE_C_FLAGS#-ffile-prefix-map=$EXT_BUILD_ROOT=.
CMAKE_INSTALL_LIBDIRlib/
CMAKE_INSTALL_RPATH\$ORIGIN/../lib;\$ORIGIN-
CMAKE_PREFIX_PATH$EXT_BUILD_DEPS/cpu_ggml!
LANES_LANE_IDlinux-x86_64-cpuc
LANES_PATCH_STACK_DIGESTGsha256:a9686d04f165328063f911c95975d68f80323ab83af19cf1b843ea03984795c4
LLAMA_BUILD_COMMIT0c1e570
LLAMA_BUILD_EXAMPLESON
LLAMA_BUILD_SERVERON
LLAMA_BUILD_TESTSON
LLAMA_BUILD_TOOLSON
LLAMA_BUILD_UIOFF
LLAMA_OPENSSLOFF
LLAMA_USE_PREBUILT_UIOFF
LLAMA_USE_SYSTEM_GGMLONllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callbacktest-tokenizer-0test-tokenizer-1-spmtest-unicodetest-samplingtest-reasoning-budgettest-grammar-parsertest-grammar-integrationtest-llama-grammartest-batch-alloc	test-chattest-json-schema-to-grammartest-llama-archstest-recurrent-state-rollbacktest-save-load-statetest-chat-peg-parser
test-jinjatest-json-schematest-chat-auto-parsertest-chat-templatetest-logtest-peg-parsertest-thread-safetytest-arg-parsertest-model-resolutiontest-opttest-tiled-mulmattest-model-load-canceltest-autoreleasetest-backend-samplertest-state-restore-fragmentedtest-mtmd-c-apitest-mtmd-impl"Í
	configurecmake-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGIN-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ON -DLANES_LANE_ID=linux-x86_64-cpub-DLANES_PATCH_STACK_DIGEST=sha256:a9686d04f165328063f911c95975d68f80323ab83af19cf1b843ea03984795c4-DLLAMA_BUILD_COMMIT=0c1e570t-DCMAKE_TOOLCHAIN_FILE=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_llama.build_tmpdir/crosstool_bazel.cmakeQ-DCMAKE_INSTALL_PREFIX=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_llama∞-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_llama.ext_build_deps;$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_llama.ext_build_deps/cpu_ggml-DCMAKE_RANLIB=-GNinja&$EXT_BUILD_ROOT/external/llama_cpp/src◊£p=
◊Î?"r
build llama-completioncmake--build.--configRelease--targetllama-completion
--parallel2{ÆG·t@"j
build llama-simplecmake--build.--configRelease--targetllama-simple
--parallel2ºtìV‚?"h
build llama-benchcmake--build.--configRelease--targetllama-bench
--parallel2Ó|?5^:)@"j
build llama-servercmake--build.--configRelease--targetllama-server
--parallel2ß∆K7)Y@"j
build llama-logitscmake--build.--configRelease--targetllama-logits
--parallel2V-≤È?"r
build test-backend-opscmake--build.--configRelease--targettest-backend-ops
--parallel2≤ùÔß∆B@"x
build llama-eval-callbackcmake--build.--configRelease--targetllama-eval-callback
--parallel2«K7âA`˘?"r
build test-tokenizer-0cmake--build.--configRelease--targettest-tokenizer-0
--parallel2?5^∫I˙?"z
build test-tokenizer-1-spmcmake--build.--configRelease--targettest-tokenizer-1-spm
--parallel2d;ﬂOçóÚ?"j
build test-unicodecmake--build.--configRelease--targettest-unicode
--parallel2âA`Â–"€?"l
build test-samplingcmake--build.--configRelease--targettest-sampling
--parallel2¯S„•õƒ?"|
build test-reasoning-budgetcmake--build.--configRelease--targettest-reasoning-budget
--parallel2wæü/›¯?"x
build test-grammar-parsercmake--build.--configRelease--targettest-grammar-parser
--parallel2+áŸÙ?"Ç
build test-grammar-integrationcmake--build.--configRelease--targettest-grammar-integration
--parallel2wæü/›@"v
build test-llama-grammarcmake--build.--configRelease--targettest-llama-grammar
--parallel2¨Zd;˜?"r
build test-batch-alloccmake--build.--configRelease--targettest-batch-alloc
--parallel2öôôôôô"@"d
build test-chatcmake--build.--configRelease--target	test-chat
--parallel2q=
◊£pD@"à
!build test-json-schema-to-grammarcmake--build.--configRelease--targettest-json-schema-to-grammar
--parallel2ˆ(\è¬u@"r
build test-llama-archscmake--build.--configRelease--targettest-llama-archs
--parallel2B`Â–"€@"å
#build test-recurrent-state-rollbackcmake--build.--configRelease--targettest-recurrent-state-rollback
--parallel2ˆ(\è¬ı@"z
build test-save-load-statecmake--build.--configRelease--targettest-save-load-state
--parallel2J+á@"z
build test-chat-peg-parsercmake--build.--configRelease--targettest-chat-peg-parser
--parallel2·zÆGa%@"f
build test-jinjacmake--build.--configRelease--target
test-jinja
--parallel2çónÉÄ-@"r
build test-json-schemacmake--build.--configRelease--targettest-json-schema
--parallel2!∞rhëÌ @"|
build test-chat-auto-parsercmake--build.--configRelease--targettest-chat-auto-parser
--parallel2+áŸŒw-@"v
build test-chat-templatecmake--build.--configRelease--targettest-chat-template
--parallel2ãlÁ˚©Ò@"b
build test-logcmake--build.--configRelease--targettest-log
--parallel2B`Â–"€…?"p
build test-peg-parsercmake--build.--configRelease--targettest-peg-parser
--parallel2™Ò“Mb–8@"v
build test-thread-safetycmake--build.--configRelease--targettest-thread-safety
--parallel2
◊£p=
@"p
build test-arg-parsercmake--build.--configRelease--targettest-arg-parser
--parallel2¶õƒ ∞r@"|
build test-model-resolutioncmake--build.--configRelease--targettest-model-resolution
--parallel2!∞rhëÌ@"b
build test-optcmake--build.--configRelease--targettest-opt
--parallel2V-≤ı?"t
build test-tiled-mulmatcmake--build.--configRelease--targettest-tiled-mulmat
--parallel25^∫I„?"~
build test-model-load-cancelcmake--build.--configRelease--targettest-model-load-cancel
--parallel2∂Û˝‘xÈÍ?"r
build test-autoreleasecmake--build.--configRelease--targettest-autorelease
--parallel2X9¥»vÍ?"z
build test-backend-samplercmake--build.--configRelease--targettest-backend-sampler
--parallel2-≤ùÔß∆@"å
#build test-state-restore-fragmentedcmake--build.--configRelease--targettest-state-restore-fragmented
--parallel2ònÉ¿ ˜?"p
build test-mtmd-c-apicmake--build.--configRelease--targettest-mtmd-c-api
--parallel27âA`Â–¬?"n
build test-mtmd-implcmake--build.--configRelease--targettest-mtmd-impl
--parallel2ÅïCãlg@"“
postfix_scriptbash-c¨set -euo pipefail
lanes_take() { found=$(find . -name CMakeFiles -prune -o -name "$2" \( -type f -o -type l \) -print | sort | sed -n 1p); test -n "$found" || { echo "postfix_script: $2 was not built" >&2; exit 1; }; mkdir -p "$INSTALLDIR/$1"; cp -L "$found" "$INSTALLDIR/$1/$2"; }
lanes_take bin llama-completion
lanes_take bin llama-simple
lanes_take bin llama-bench
lanes_take bin llama-server
lanes_take bin llama-logits
lanes_take bin test-backend-ops
lanes_take bin llama-eval-callback
lanes_take bin test-tokenizer-0
lanes_take bin test-tokenizer-1-spm
lanes_take bin test-unicode
lanes_take bin test-sampling
lanes_take bin test-reasoning-budget
lanes_take bin test-grammar-parser
lanes_take bin test-grammar-integration
lanes_take bin test-llama-grammar
lanes_take bin test-batch-alloc
lanes_take bin test-chat
lanes_take bin test-json-schema-to-grammar
lanes_take bin test-llama-archs
lanes_take bin test-recurrent-state-rollback
lanes_take bin test-save-load-state
lanes_take bin test-chat-peg-parser
lanes_take bin test-jinja
lanes_take bin test-json-schema
lanes_take bin test-chat-auto-parser
lanes_take bin test-chat-template
lanes_take bin test-log
lanes_take bin test-peg-parser
lanes_take bin test-thread-safety
lanes_take bin test-arg-parser
lanes_take bin test-model-resolution
lanes_take bin test-opt
lanes_take bin test-tiled-mulmat
lanes_take bin test-model-load-cancel
lanes_take bin test-autorelease
lanes_take bin test-backend-sampler
lanes_take bin test-state-restore-fragmented
lanes_take bin test-mtmd-c-api
lanes_take bin test-mtmd-impl
lanes_take lib libllama.so.0
lanes_take lib libllama-common.so.0
lanes_take lib libmtmd.so.0
lanes_take lib libllama-completion-impl.so
lanes_take lib libllama-server-impl.so
lanes_take lib libllama-bench-impl.so
mkdir -p "$INSTALLDIR/tests" && cp -R tests/. "$INSTALLDIR/tests/"
mkdir -p "$INSTALLDIR/examples/eval-callback" && cp -R examples/eval-callback/. "$INSTALLDIR/examples/eval-callback/"ffffffﬁ?*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsZllama-eval-callbackbd
bin/libggml-cpu-alderlake.so@cbc0343164c59485e32e3eea6b5e13cb9dbc5851a4dfb48333d0fd7645b01481∆Tbe
bin/libggml-cpu-cannonlake.so@66a36ae2c1cc94f462d8de23b8f2b6af3a469826dbd5ffb43675d2e2ad72d843»Ûcbf
bin/libggml-cpu-cascadelake.so@a2f4a5bd621afd1c4ed4090770ab9ac9a167042b9f90d86358823a6eba65704f†Òdbe
bin/libggml-cpu-cooperlake.so@0893bb9e2879e8a8d690f73525e1c7e2c35f545331e8b82eb4662033fab78142‡Òdbb
bin/libggml-cpu-haswell.so@53e8db0ac9b77b0b594304bfb85acfbefb08cd5e7eca2c43c1502abcd1ebaefcÊTbb
bin/libggml-cpu-icelake.so@5572adfbdd5f2c8601e93216b1424f7933c99afb988020a266b488fe1dbe6704†Òdbd
bin/libggml-cpu-ivybridge.so@236d2e574117985f9ac0b5f92f809c2c7c40b5a286a78c927e51e8033c071126ÔObe
bin/libggml-cpu-piledriver.so@dc2e3bded63510ed6bbba8b7add674daf82b7985566f43bf18a4b45391c6ea07œObf
bin/libggml-cpu-sandybridge.so@d5bfeef6d8c9d53588f590074ee1aadd9544bc2c8920699babf93126af819ecbêßObi
!bin/libggml-cpu-sapphirerapids.so@034841ce50b41a3715e58a84b786dc72166c3a5136ba5150bfe7691b3f8534fc†Úrbc
bin/libggml-cpu-skylakex.so@a0379c9ef7455a62948202affe4983f8532d406968f251e75f0f3d1e94793a9d»Ûcb`
bin/libggml-cpu-sse42.so@3656df08d5d4051cd0eafc6137b9e4d4abe36a4a8c3f144a18df13e407714005®Æ;b^
bin/libggml-cpu-x64.so@fd4667be98ece537a145bcb687de2df8474218854bfb925650623ef02184db18àØ;b_
bin/libggml-cpu-zen4.so@5ad2e32a2d772bc18ba36866f9317cf142a434630d47c2f93626b039bf4382b7‡ÒdbV
bin/llama-bench@58653c87a518b3bb173ecf29a55975bd5fd063940c992d9840d24797e00d5b37®=b[
bin/llama-completion@b3a59b32799063afea7dcff55daacb8fde97820f448ae457fa2a9f6e08baac57∞=b_
bin/llama-eval-callback@5953994833e3344b31051c447f59a83eee492d25010b76844362f5bffc83beacòõbX
bin/llama-logits@1013a20e28a438cb5c1fb93b934af49f52ef74ecee38820c6193e85aedb0c04eàŸbW
bin/llama-server@38de10681609ff0bc445f16487d39bb4b01e472e2f64110a93f32a75bf2fccce®=bX
bin/llama-simple@94d498a999a3579675ca8897fe74bcd0ca0b190255ee5c070e75595b963dd678ÿ≥b\
bin/test-backend-ops@d0ec53056447191472ad192666b3715fc91d3ec6f18e65fb362d0f717958e945ÿÖ[b]
lib/libggml-base.so.0@46485b186fbc2970c90d93b5a1e6d63b23df03bf713f1c0968f2f00fcdf750b8¯Õ7bX
lib/libggml.so.0@c527facf0f311063c7e91355d96b255563a014361c06318ca03eecd0c5a35843∏Ább
lib/libllama-bench-impl.so@5263a0da06a7aac6302e4753c6948fe45aa9b9bf8df3b5b1ee3e8e45f12bfb65ò‰ba
lib/libllama-common.so.0@0d9e85364a42a8b427ff042bc2801daea6c2d258bdf4e237fe29d57d4096f4ef®ΩÓbg
lib/libllama-completion-impl.so@9779499ad132c0a82a11713666444a06ab31b97a5464ebe3316e59aaf656d4e4†ˆbd
lib/libllama-server-impl.so@a7183ea1e90b35e9ac10ab74167e5985a2c3872271ea267ba5df7f7e5719e005ò÷ÈbZ
lib/libllama.so.0@5382637cdcdfa097b784657c635350e2bf5dff2fc3d8f4361cd2bff3f6a4f292ò≥übX
lib/libmtmd.so.0@004831661b39ff76d6fbc96ec922a57be5c54c707cf137c461f423c7044cd1fdøwj!
linuxx86_646.18.44-fc-v1045rbazel-bootstrap 4.2.3+ds-9yÜõã∂Ì√⁄AÅeqÁÓ√⁄A