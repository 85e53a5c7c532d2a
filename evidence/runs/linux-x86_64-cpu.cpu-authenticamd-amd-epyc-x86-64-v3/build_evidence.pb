linux-x86_64-cpu*ª
#pypi-sdist:llama-cpp-python==0.3.36@832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e(0c1e57098bba43ac29e6e3b677cdceebdd22334f"(llama_cpp_python-0.3.36/vendor/llama.cpp2d
 0001-build-info-lane-stamp.patch@b3e0eeebb13d2b057b731ca5298e7d09357307f45ea4b7a7eebccc85a4c04e382`
0002-llama-logits-tool.patch@9e7af5656a70de7c6db44890d37290ab87ed7ba15a74ff6c4f3d2a4ab0f558602h
$0003-ggml-standalone-pkgconfig.patch@780518e19eae5f15764db45bed306faf8f3637130390b43d4cd66a5ede7564bb:Gsha256:2c020aa498121bdb9403047161808de41a0598dd5dbbbd4855b2f0f81e7b47e2Bu
host-cc%c++ (Debian 12.2.0-14+deb12u1) 12.2.0/usr/bin/c++*local2
cmakecmake version 3.25.12
ninja1.11.1J
CGNU12.2.0"/usr/bin/ccJ 
CXXGNU12.2.0"/usr/bin/c++RÀ
cpu_ggml
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease
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
GGML_NATIVEOFF"⁄
	configurecmake-GNinja-S+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml-B"/tmp/cmake-cpu_ggml-clao5d80/build;-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_ggml-clao5d80/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGIN-DGGML_AVX=ON-DGGML_AVX2=ON-DGGML_BMI2=ON-DGGML_BUILD_COMMIT=0c1e570-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_F16C=ON-DGGML_FMA=ON-DGGML_NATIVE=OFFìV-Ú?"K
buildcmake--build"/tmp/cmake-cpu_ggml-clao5d80/build-j2/›$ÅeD@"H
installcmake	--install"/tmp/cmake-cpu_ggml-clao5d80/buildúƒ ∞rhë?*cmake version 3.25.121.11.18Rõ
	cpu_llama
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHON
CMAKE_INSTALL_LIBDIRlib-
CMAKE_INSTALL_RPATH$ORIGIN/../lib;$ORIGIN!
LANES_LANE_IDlinux-x86_64-cpuc
LANES_PATCH_STACK_DIGESTGsha256:2c020aa498121bdb9403047161808de41a0598dd5dbbbd4855b2f0f81e7b47e2
LLAMA_BUILD_COMMIT0c1e570
LLAMA_BUILD_EXAMPLESON
LLAMA_BUILD_SERVERON
LLAMA_BUILD_TESTSON
LLAMA_BUILD_TOOLSON
LLAMA_BUILD_UIOFF
LLAMA_OPENSSLOFF
LLAMA_USE_PREBUILT_UIOFF
LLAMA_USE_SYSTEM_GGMLONllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callback"ï
	configurecmake-GNinja-S&$EXT_BUILD_ROOT/external/llama_cpp/src-B#/tmp/cmake-cpu_llama-72cxw38f/build<-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cpu_llama-72cxw38f/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGINM-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cpu_ggml -DLANES_LANE_ID=linux-x86_64-cpub-DLANES_PATCH_STACK_DIGEST=sha256:2c020aa498121bdb9403047161808de41a0598dd5dbbbd4855b2f0f81e7b47e2-DLLAMA_BUILD_COMMIT=0c1e570-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ON+áŸŒ˜„?"∆
buildcmake--build#/tmp/cmake-cpu_llama-72cxw38f/build-j2--targetllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callback{ÆG·ÊÄ@*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsZllama-eval-callbackbW
bin/llama-bench@f61e175c3fd94de30e8892283e045d50961b192974201fec760afae668e5e70aÄçb[
bin/llama-completion@ae6c278e51ceb1a8767ca9800392c9cbbeeb3e92dfd0fde1e8f2b98c0dea670e‡|b_
bin/llama-eval-callback@5be18c10da121927abd52b801f9efd3545c1b0691bd869cf294f185d533334a2ÿΩbX
bin/llama-logits@1c4a8a3668caa9c1357c68e54dc08602c981731a10a0adb648561a9389d2603d∏—bX
bin/llama-server@46f2ce65ed58404efb5237bd3a4a1b1f3cbaf9509f2501445b403263bb1495f1ÄçbX
bin/llama-simple@7e8f3009cbc5cb198dcd95d22bc558abed40025e7e2f98e120c5671aec52cdcdÿb\
bin/test-backend-ops@9e889235d629eaf141b971c2f03748c24239377140c4c35e95d671c149b38aa4Ë©Yb]
lib/libggml-base.so.0@3c2d39a9c1dbb02c6463e392d26a5467fd36ae695d5942faea7cd6bcdf6989deÄ◊7b\
lib/libggml-cpu.so.0@7aca71fba9d1d71437a193c4467b6083f50b26f2196da9bb85773e1d35ca52ca–ˇMbX
lib/libggml.so.0@fe92f1b330c6b4524bac078aa79ebc89dd67357d1be9a724704a57bd371a197a–±bb
lib/libllama-bench-impl.so@8ad4bdc43b95159a245014bd49a545fedab3a0e1ba41b461cbae1970e26cb500êÑba
lib/libllama-common.so.0@495386f73634277e657b04821db6c889139c19cd61ca435f056c47cf24b96040àÃÎbg
lib/libllama-completion-impl.so@59e8e6055f661d4c41fc8f11209d72e9201dd00a84e1bdd43749466d7918b71e¯Äbd
lib/libllama-server-impl.so@badf84412bcf87ba5bc3cac95a7bec0cbe56cbc12cf02e1ab9c7d65c745095c9–®ËbZ
lib/libllama.so.0@98d7cc980f024a863b6ff44827dfb140324d351d8462c41c9a2ec2883b661dc8†ØöbX
lib/libmtmd.so.0@45f2da48d8ee1815b245d6e7e8c0d51b5acef5a0b07f74836c0e9d2cff65531a»—vj 
linuxx86_646.18.44-fc-v509rbazel-bootstrap 4.2.3+ds-9y‚ñÔ*^√⁄AÅ˙êÿG`√⁄A