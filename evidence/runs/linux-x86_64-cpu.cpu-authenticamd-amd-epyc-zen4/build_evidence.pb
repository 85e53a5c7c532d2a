linux-x86_64-cpu*»
#pypi-sdist:llama-cpp-python==0.3.36@832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e(0c1e57098bba43ac29e6e3b677cdceebdd22334f"(llama_cpp_python-0.3.36/vendor/llama.cpp2d
 0001-build-info-lane-stamp.patch@b3e0eeebb13d2b057b731ca5298e7d09357307f45ea4b7a7eebccc85a4c04e382`
0002-llama-logits-tool.patch@796f5035b50c730405c5c1f53526c867d8e339a0d3dc9176680bc0dd3b28b7552h
$0003-ggml-standalone-pkgconfig.patch@780518e19eae5f15764db45bed306faf8f3637130390b43d4cd66a5ede7564bb2f
"0004-ggml-vulkan-old-headers.patch@a2afa6aa675b96c236f30e7f7e4f02656024db3b058f2067ac136d59ea61fd84:Gsha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62bBu
host-cc%c++ (Debian 12.2.0-14+deb12u1) 12.2.0/usr/bin/c++*local2
cmakecmake version 3.25.12
ninja1.11.1J
CGNU12.2.0"/usr/bin/ccJ 
CXXGNU12.2.0"/usr/bin/c++R†
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
GGML_NATIVEOFF"ø
	configurecmake-GNinja-S+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml-B"/tmp/cmake-cpu_ggml-i2wnvl4u/build;-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_ggml-i2wnvl4u/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGIN-DGGML_BACKEND_DL=ON-DGGML_BUILD_COMMIT=0c1e570-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_CPU_ALL_VARIANTS=ON-DGGML_LLAMAFILE=ON-DGGML_NATIVE=OFF^ºI+ï?"K
buildcmake--build"/tmp/cmake-cpu_ggml-i2wnvl4u/build-j2X9´Èvê{@"H
installcmake	--install"/tmp/cmake-cpu_ggml-i2wnvl4u/build9´Èv¾Ÿª?*cmake version 3.25.121.11.18R›
	cpu_llama
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON
CMAKE_INSTALL_LIBDIRlib-
CMAKE_INSTALL_RPATH$ORIGIN/../lib;$ORIGIN!
LANES_LANE_IDlinux-x86_64-cpuc
LANES_PATCH_STACK_DIGESTGsha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b
LLAMA_BUILD_COMMIT0c1e570
LLAMA_BUILD_EXAMPLESON
LLAMA_BUILD_SERVERON
LLAMA_BUILD_TESTSON
LLAMA_BUILD_TOOLSON
LLAMA_BUILD_UIOFF
LLAMA_OPENSSLOFF
LLAMA_USE_PREBUILT_UIOFF
LLAMA_USE_SYSTEM_GGMLONllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callback"•
	configurecmake-GNinja-S&$EXT_BUILD_ROOT/external/llama_cpp/src-B#/tmp/cmake-cpu_llama-in_bx_di/build<-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_llama-in_bx_di/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGINM-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml -DLANES_LANE_ID=linux-x86_64-cpub-DLANES_PATCH_STACK_DIGEST=sha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b-DLLAMA_BUILD_COMMIT=0c1e570-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ON¤p=
×£è?"Æ
buildcmake--build#/tmp/cmake-cpu_llama-in_bx_di/build-j2--targetllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callbackJ+‡®|@*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsZllama-eval-callbackbd
bin/libggml-cpu-alderlake.so@8ce60cbb6484249c4d798e683fd85490ecf4220ed6057edf3534bac5eda3ebcaØÉTbe
bin/libggml-cpu-cannonlake.so@a229b3296af151128f6a3d74caedd342a712957ca946d475c7aa0087567c3863¸öcbf
bin/libggml-cpu-cascadelake.so@bb80d6081d378b69ac669093c34b1ca62561550a2fe9695de4b1370c3b2fd4c5ôdbe
bin/libggml-cpu-cooperlake.so@1ca9728f571d70a32e667023a5708b749ea9d3ada514550b5b232dde602467f4Ðôdbb
bin/libggml-cpu-haswell.so@5618251f854aa1669747b32101787f40334241a734c280a2df177d962afe8be7ØéTbb
bin/libggml-cpu-icelake.so@7ee159b1d8be72aa0cfbfcfad656ea0b2504e6f5398f7d0fabd7d8d4d7762112ôdbd
bin/libggml-cpu-ivybridge.so@ba2007d18159c664a7116d006c9a5576e2594c503debbcf3ca8347164f5c129eàòObe
bin/libggml-cpu-piledriver.so@b69a1741135a16b4f4abba27bed9e067e8883847d3d625f5b5eb39f85b423354àÒObf
bin/libggml-cpu-sandybridge.so@3412c3cca9ea8662147b347e6535f8e9da2eaf8ac7fc58792ef33b917ad357a4€ªObi
!bin/libggml-cpu-sapphirerapids.so@4d9e6823d695d97b85d8759c5d62d6e3c8804fcb14524abebdad3554bc77467bõrbc
bin/libggml-cpu-skylakex.so@9a61d51e2c1279564d53834b9ee4f99611e3260752d992877857bd6eb71909c4¸öcb`
bin/libggml-cpu-sse42.so@81d9ce2f41fc7d2e8712518db5e1d478b25c4b187caec3f45d9b06e10b53d20bØ°;b^
bin/libggml-cpu-x64.so@4fa09f3e112fda7a04648489b6f860ef9084f70130757a8d0e3684d64e9d79e5Ð±;b_
bin/libggml-cpu-zen4.so@5c009efa9927c8813ead1439f449897002a44e24f3052e8ad9f84ea4fb0fefc0ÐôdbW
bin/llama-bench@adb8c0a23e0b418e4fc4fa29b187b3b71520e8e6246093765c696664d7db0fec€b[
bin/llama-completion@ae6c278e51ceb1a8767ca9800392c9cbbeeb3e92dfd0fde1e8f2b98c0dea670eà|b_
bin/llama-eval-callback@5be18c10da121927abd52b801f9efd3545c1b0691bd869cf294f185d533334a2Ø½bX
bin/llama-logits@9d2b5fcf8baed6db776fb639801002b67fd95e055b848bc1dee6a208e77cfd24ÀýbX
bin/llama-server@0d41c61a8e4426428442714eac2e5858990dc32ae86021fb71aea830fa7fae05€bX
bin/llama-simple@7e8f3009cbc5cb198dcd95d22bc558abed40025e7e2f98e120c5671aec52cdcdðØb\
bin/test-backend-ops@9e889235d629eaf141b971c2f03748c24239377140c4c35e95d671c149b38aa4è©Yb]
lib/libggml-base.so.0@979c44326ace376534530d84338880657a3fe2fc7492487724df39080b4c09c7€×7bX
lib/libggml.so.0@0d7b82b803e124c98567d39d718b2c3cfcb92a7bb5618e8b8ed20183d51cab75®bb
lib/libllama-bench-impl.so@8ad4bdc43b95159a245014bd49a545fedab3a0e1ba41b461cbae1970e26cb500„ba
lib/libllama-common.so.0@266d456dfeb8d05d8df8f6cc24a1bca0fae7b9564b82f233eae006c9a3ab247aˆÌëbg
lib/libllama-completion-impl.so@59e8e6055f661d4c41fc8f11209d72e9201dd00a84e1bdd43749466d7918b71eø€bd
lib/libllama-server-impl.so@badf84412bcf87ba5bc3cac95a7bec0cbe56cbc12cf02e1ab9c7d65c745095c9Ð¨èbZ
lib/libllama.so.0@98d7cc980f024a863b6ff44827dfb140324d351d8462c41c9a2ec2883b661dc8 ¯šbX
lib/libmtmd.so.0@45f2da48d8ee1815b245d6e7e8c0d51b5acef5a0b07f74836c0e9d2cff65531aÈÑvj 
linuxx86_646.18.44-fc-v509rbazel-bootstrap 4.2.3+ds-9yZ¯jvÃÚA%<CNwÃÚA