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
CXXGNU12.2.0"/usr/bin/c++R–
cpu_ggml
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON
CMAKE_INSTALL_LIBDIRlib
CMAKE_INSTALL_RPATH$ORIGIN
	GGML_AVX2ON
GGML_AVXON
	GGML_BMI2ON
GGML_BUILD_COMMIT0c1e570
GGML_BUILD_EXAMPLESOFF
GGML_BUILD_TESTSOFF
	GGML_F16CON
GGML_FMAON
GGML_NATIVEOFF"ÿ
	configurecmake-GNinja-S+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml-B"/tmp/cmake-cpu_ggml-01ggiepe/build;-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_ggml-01ggiepe/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGIN-DGGML_AVX=ON-DGGML_AVX2=ON-DGGML_BMI2=ON-DGGML_BUILD_COMMIT=0c1e570-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_F16C=ON-DGGML_FMA=ON-DGGML_NATIVE=OFF¦›Ä °rì?"K
buildcmake--build"/tmp/cmake-cpu_ggml-01ggiepe/build-j2°rh‘íD@"H
installcmake	--install"/tmp/cmake-cpu_ggml-01ggiepe/buildyé&1¬Œ?*cmake version 3.25.121.11.18R›
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
	configurecmake-GNinja-S&$EXT_BUILD_ROOT/external/llama_cpp/src-B#/tmp/cmake-cpu_llama-uo5_f1ny/build<-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_llama-uo5_f1ny/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGINM-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml -DLANES_LANE_ID=linux-x86_64-cpub-DLANES_PATCH_STACK_DIGEST=sha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b-DLLAMA_BUILD_COMMIT=0c1e570-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ONÉv¾Ÿ/á?"Æ
buildcmake--build#/tmp/cmake-cpu_llama-uo5_f1ny/build-j2--targetllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callback)\Âõ€€@*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsZllama-eval-callbackbW
bin/llama-bench@adb8c0a23e0b418e4fc4fa29b187b3b71520e8e6246093765c696664d7db0fec€b[
bin/llama-completion@ae6c278e51ceb1a8767ca9800392c9cbbeeb3e92dfd0fde1e8f2b98c0dea670eà|b_
bin/llama-eval-callback@5be18c10da121927abd52b801f9efd3545c1b0691bd869cf294f185d533334a2Ø½bX
bin/llama-logits@9d2b5fcf8baed6db776fb639801002b67fd95e055b848bc1dee6a208e77cfd24ÀýbX
bin/llama-server@0d41c61a8e4426428442714eac2e5858990dc32ae86021fb71aea830fa7fae05€bX
bin/llama-simple@7e8f3009cbc5cb198dcd95d22bc558abed40025e7e2f98e120c5671aec52cdcdðØb\
bin/test-backend-ops@9e889235d629eaf141b971c2f03748c24239377140c4c35e95d671c149b38aa4è©Yb]
lib/libggml-base.so.0@979c44326ace376534530d84338880657a3fe2fc7492487724df39080b4c09c7€×7b\
lib/libggml-cpu.so.0@4ef62ebcf8f4d9254001ed460383bbb2062ff1341d94f12ce041932e44fe52f2ÐÿMbX
lib/libggml.so.0@17fbfab3d746a5f7bf233e648484ed2ff91eeca0400208d07be91d50f75f7d83Ð±bb
lib/libllama-bench-impl.so@8ad4bdc43b95159a245014bd49a545fedab3a0e1ba41b461cbae1970e26cb500„ba
lib/libllama-common.so.0@266d456dfeb8d05d8df8f6cc24a1bca0fae7b9564b82f233eae006c9a3ab247aˆÌëbg
lib/libllama-completion-impl.so@59e8e6055f661d4c41fc8f11209d72e9201dd00a84e1bdd43749466d7918b71eø€bd
lib/libllama-server-impl.so@badf84412bcf87ba5bc3cac95a7bec0cbe56cbc12cf02e1ab9c7d65c745095c9Ð¨èbZ
lib/libllama.so.0@98d7cc980f024a863b6ff44827dfb140324d351d8462c41c9a2ec2883b661dc8 ¯šbX
lib/libmtmd.so.0@45f2da48d8ee1815b245d6e7e8c0d51b5acef5a0b07f74836c0e9d2cff65531aÈÑvj 
linuxx86_646.18.44-fc-v509rbazel-bootstrap 4.2.3+ds-9y‘ŠEhÃÚA$Ð]`kÃÚA