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
CGNU12.2.0"/usr/bin/ccJ 
CXXGNU12.2.0"/usr/bin/c++RÜ
cpu_ggml
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON
CMAKE_INSTALL_LIBDIRlib
CMAKE_INSTALL_RPATH$ORIGIN
GGML_BACKEND_DLON
GGML_BUILD_COMMIT0c1e570
GGML_BUILD_EXAMPLESOFF
GGML_BUILD_TESTSOFF
GGML_CPU_ALL_VARIANTSON
GGML_LLAMAFILEON
GGML_NATIVEOFF"¯
	configurecmake-GNinja-S+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml-B"/tmp/cmake-cpu_ggml-vu0ssjj7/build;-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_ggml-vu0ssjj7/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGIN-DGGML_BACKEND_DL=ON-DGGML_BUILD_COMMIT=0c1e570-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_CPU_ALL_VARIANTS=ON-DGGML_LLAMAFILE=ON-DGGML_NATIVE=OFF'1¨ZÙ?"K
buildcmake--build"/tmp/cmake-cpu_ggml-vu0ssjj7/build-j2X9¥»vrq@"H
installcmake	--install"/tmp/cmake-cpu_ggml-vu0ssjj7/buildZd;ﬂOçß?*cmake version 3.25.121.11.18Rõ
	cpu_llama
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON
CMAKE_INSTALL_LIBDIRlib-
CMAKE_INSTALL_RPATH$ORIGIN/../lib;$ORIGIN!
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
LLAMA_USE_SYSTEM_GGMLONllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callback"ï
	configurecmake-GNinja-S&$EXT_BUILD_ROOT/external/llama_cpp/src-B#/tmp/cmake-cpu_llama-irqlmxz4/build<-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_llama-irqlmxz4/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGINM-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml -DLANES_LANE_ID=linux-x86_64-cpub-DLANES_PATCH_STACK_DIGEST=sha256:a9686d04f165328063f911c95975d68f80323ab83af19cf1b843ea03984795c4-DLLAMA_BUILD_COMMIT=0c1e570-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ON„•õƒ ∞Ê?"∆
buildcmake--build#/tmp/cmake-cpu_llama-irqlmxz4/build-j2--targetllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callback¢E∂Û˝Ãu@*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsZllama-eval-callbackbd
bin/libggml-cpu-alderlake.so@8ce60cbb6484249c4d798e683fd85490ecf4220ed6057edf3534bac5eda3ebcaÿ…Tbe
bin/libggml-cpu-cannonlake.so@a229b3296af151128f6a3d74caedd342a712957ca946d475c7aa0087567c3863∏ˆcbf
bin/libggml-cpu-cascadelake.so@bb80d6081d378b69ac669093c34b1ca62561550a2fe9695de4b1370c3b2fd4c5êÙdbe
bin/libggml-cpu-cooperlake.so@1ca9728f571d70a32e667023a5708b749ea9d3ada514550b5b232dde602467f4–Ùdbb
bin/libggml-cpu-haswell.so@5618251f854aa1669747b32101787f40334241a734c280a2df177d962afe8be7ÿÈTbb
bin/libggml-cpu-icelake.so@7ee159b1d8be72aa0cfbfcfad656ea0b2504e6f5398f7d0fabd7d8d4d7762112êÙdbd
bin/libggml-cpu-ivybridge.so@ba2007d18159c664a7116d006c9a5576e2594c503debbcf3ca8347164f5c129e‡ÚObe
bin/libggml-cpu-piledriver.so@b69a1741135a16b4f4abba27bed9e067e8883847d3d625f5b5eb39f85b423354‡“Obf
bin/libggml-cpu-sandybridge.so@3412c3cca9ea8662147b347e6535f8e9da2eaf8ac7fc58792ef33b917ad357a4Ä™Obi
!bin/libggml-cpu-sapphirerapids.so@f1e2e28353ef7e17631ce82f46732c43ec785eea81c7fad2632f1db950f015f2êırbc
bin/libggml-cpu-skylakex.so@9a61d51e2c1279564d53834b9ee4f99611e3260752d992877857bd6eb71909c4∏ˆcb`
bin/libggml-cpu-sse42.so@81d9ce2f41fc7d2e8712518db5e1d478b25c4b187caec3f45d9b06e10b53d20bÿ∞;b^
bin/libggml-cpu-x64.so@4fa09f3e112fda7a04648489b6f860ef9084f70130757a8d0e3684d64e9d79e5–±;b_
bin/libggml-cpu-zen4.so@5c009efa9927c8813ead1439f449897002a44e24f3052e8ad9f84ea4fb0fefc0–ÙdbW
bin/llama-bench@e4b7222f96a599dff083bccec1deba3aea387233cafb4865ccd02e6c62ed672bÄçb[
bin/llama-completion@ae6c278e51ceb1a8767ca9800392c9cbbeeb3e92dfd0fde1e8f2b98c0dea670e‡|b_
bin/llama-eval-callback@5be18c10da121927abd52b801f9efd3545c1b0691bd869cf294f185d533334a2ÿΩbX
bin/llama-logits@9d2b5fcf8baed6db776fb639801002b67fd95e055b848bc1dee6a208e77cfd24¿˝bX
bin/llama-server@f0c0ee865188ec37cddf5cee8f9d7770744eff75bab0e6cbcf1c1d2a165785d8ÄçbX
bin/llama-simple@7e8f3009cbc5cb198dcd95d22bc558abed40025e7e2f98e120c5671aec52cdcdÿb\
bin/test-backend-ops@9e889235d629eaf141b971c2f03748c24239377140c4c35e95d671c149b38aa4Ë©Yb]
lib/libggml-base.so.0@979c44326ace376534530d84338880657a3fe2fc7492487724df39080b4c09c7Ä◊7bX
lib/libggml.so.0@0d7b82b803e124c98567d39d718b2c3cfcb92a7bb5618e8b8ed20183d51cab75êÆbb
lib/libllama-bench-impl.so@8ad4bdc43b95159a245014bd49a545fedab3a0e1ba41b461cbae1970e26cb500êÑba
lib/libllama-common.so.0@0e8f94f672d7e48066d60668d696f235fa6db55ebd50c2438b8671383a7f025dàÃÎbg
lib/libllama-completion-impl.so@59e8e6055f661d4c41fc8f11209d72e9201dd00a84e1bdd43749466d7918b71e¯Äbd
lib/libllama-server-impl.so@badf84412bcf87ba5bc3cac95a7bec0cbe56cbc12cf02e1ab9c7d65c745095c9–®ËbZ
lib/libllama.so.0@98d7cc980f024a863b6ff44827dfb140324d351d8462c41c9a2ec2883b661dc8†ØöbX
lib/libmtmd.so.0@45f2da48d8ee1815b245d6e7e8c0d51b5acef5a0b07f74836c0e9d2cff65531a»—vj!
linuxx86_646.18.44-fc-v1098rbazel-bootstrap 4.2.3+ds-9yöQ›Ã√⁄AÅ˘7ÙzÕ√⁄A