linux-x86_64-cuda*»
#pypi-sdist:llama-cpp-python==0.3.36@832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e(0c1e57098bba43ac29e6e3b677cdceebdd22334f"(llama_cpp_python-0.3.36/vendor/llama.cpp2d
 0001-build-info-lane-stamp.patch@b3e0eeebb13d2b057b731ca5298e7d09357307f45ea4b7a7eebccc85a4c04e382`
0002-llama-logits-tool.patch@9e7af5656a70de7c6db44890d37290ab87ed7ba15a74ff6c4f3d2a4ab0f558602h
$0003-ggml-standalone-pkgconfig.patch@780518e19eae5f15764db45bed306faf8f3637130390b43d4cd66a5ede7564bb:Gsha256:2c020aa498121bdb9403047161808de41a0598dd5dbbbd4855b2f0f81e7b47e2B‹
cuda13.0.88@cuda_toolkit//:toolkit"[
nvidia-cublas==13.1.0.3@ee8722c1f0145ab246bccb9e452153b5e0515fd094c3678df50b2a0888b8b171"]
nvidia-cuda-cccl==13.0.85@e0da7ad981f3a8aff08241b5bfc1af868742a63e2762f53a5171c492ef242649"\
nvidia-cuda-crt==13.0.88@2c8043c7c9e02492716426e9919fc78d2c5b3b2a7a768a88e952676b08aa55a4"]
nvidia-cuda-nvcc==13.0.88@56fe502eb77625a12f25172caa3cdddb4e4c8ba2c8c17dba44b164761b380f03"`
nvidia-cuda-runtime==13.0.96@7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548"X
nvidia-nvvm==13.0.88@c5f41ffeb6466944a026dfa5317d7d85355c119bbec279205d22f1869d1054e0*hermetic2¡
wheels–nvidia-cublas==13.1.0.3,nvidia-cuda-cccl==13.0.85,nvidia-cuda-crt==13.0.88,nvidia-cuda-nvcc==13.0.88,nvidia-cuda-runtime==13.0.96,nvidia-nvvm==13.0.88J
CGNU12.2.0"/usr/bin/ccJO
CUDANVIDIA13.0.88"6$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/bin/nvccJ 
CXXGNU12.2.0"/usr/bin/c++Rö
	cuda_ggml
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease
CMAKE_CUDA_ARCHITECTURES90aM
CMAKE_CUDA_COMPILER6$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/bin/nvcc[
CMAKE_EXE_LINKER_FLAGSA-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib
CMAKE_INSTALL_LIBDIRlib
CMAKE_INSTALL_RPATH$ORIGIN^
CMAKE_SHARED_LINKER_FLAGSA-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib
	GGML_AVX2ON
GGML_AVXON
	GGML_BMI2ON
GGML_BUILD_COMMIT0c1e570
GGML_BUILD_EXAMPLESOFF
GGML_BUILD_TESTSOFF
GGML_CUDA_NO_VMMON
	GGML_CUDAON
	GGML_F16CON
GGML_FMAON
GGML_NATIVEOFF"¬
	configurecmake-GNinja-S+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml-B#/tmp/cmake-cuda_ggml-o4p0052d/build<-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cuda_ggml-o4p0052d/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release-DCMAKE_CUDA_ARCHITECTURES=90aL-DCMAKE_CUDA_COMPILER=$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/bin/nvccZ-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGIN]-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib-DGGML_AVX=ON-DGGML_AVX2=ON-DGGML_BMI2=ON-DGGML_BUILD_COMMIT=0c1e570-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_CUDA=ON-DGGML_CUDA_NO_VMM=ON-DGGML_F16C=ON-DGGML_FMA=ON-DGGML_NATIVE=OFFHáz®G@"L
buildcmake--build#/tmp/cmake-cuda_ggml-o4p0052d/build-j2…ëQ¸žêœ@"I
installcmake	--install#/tmp/cmake-cuda_ggml-o4p0052d/buildƒÀÊ¡E¶³?*cmake version 3.25.121.11.18R

cuda_llama
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHONM
CMAKE_CUDA_COMPILER6$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/bin/nvcc[
CMAKE_EXE_LINKER_FLAGSA-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib
CMAKE_INSTALL_LIBDIRlib-
CMAKE_INSTALL_RPATH$ORIGIN/../lib;$ORIGIN^
CMAKE_SHARED_LINKER_FLAGSA-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib"
LANES_LANE_IDlinux-x86_64-cudac
LANES_PATCH_STACK_DIGESTGsha256:2c020aa498121bdb9403047161808de41a0598dd5dbbbd4855b2f0f81e7b47e2
LLAMA_BUILD_COMMIT0c1e570
LLAMA_BUILD_EXAMPLESON
LLAMA_BUILD_SERVERON
LLAMA_BUILD_TESTSON
LLAMA_BUILD_TOOLSON
LLAMA_BUILD_UIOFF
LLAMA_OPENSSLOFF
LLAMA_USE_PREBUILT_UIOFF
LLAMA_USE_SYSTEM_GGMLONllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-ops"¢
	configurecmake-GNinja-S&$EXT_BUILD_ROOT/external/llama_cpp/src-B$/tmp/cmake-cuda_llama-03wrb7k1/build=-DCMAKE_INSTALL_PREFIX=/tmp/cmake-cuda_llama-03wrb7k1/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ONL-DCMAKE_CUDA_COMPILER=$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/bin/nvccZ-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGINN-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/cuda_ggml]-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/cuda_toolkit/toolkit/lib!-DLANES_LANE_ID=linux-x86_64-cudab-DLANES_PATCH_STACK_DIGEST=sha256:2c020aa498121bdb9403047161808de41a0598dd5dbbbd4855b2f0f81e7b47e2-DLLAMA_BUILD_COMMIT=0c1e570-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ON+‡Ùæ?"²
buildcmake--build$/tmp/cmake-cuda_llama-03wrb7k1/build-j2--targetllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsÅ °rh­r@*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsbW
bin/llama-bench@da0e3fdf767f717284cbd25eccd7c854389d860a81097c2abbd8a29dca0ee436€b[
bin/llama-completion@ae6c278e51ceb1a8767ca9800392c9cbbeeb3e92dfd0fde1e8f2b98c0dea670eà|bX
bin/llama-logits@1c4a8a3668caa9c1357c68e54dc08602c981731a10a0adb648561a9389d2603d¸ÑbX
bin/llama-server@8a0b982a62404b6d1a4e0c5cb4b422e23aedd9511a6cb6ff7e2d4a97a406c27d€bX
bin/llama-simple@7e8f3009cbc5cb198dcd95d22bc558abed40025e7e2f98e120c5671aec52cdcdðØb\
bin/test-backend-ops@d1fe92d7707605ae2dad853e455d1fa3b2fc9c625d880e7c0d3ca3d5e443b2d7è©Yb]
lib/libggml-base.so.0@3c2d39a9c1dbb02c6463e392d26a5467fd36ae695d5942faea7cd6bcdf6989de€×7b\
lib/libggml-cpu.so.0@107b168a835aaca607821f79d3f7dcacf5eadc9e20c6d5b1efd2baebd0afb9e5ÐÿMb^
lib/libggml-cuda.so.0@d9025267c888ad6808d124ff45318b5a0920a9eb0373bded487ff0a84f950f5aðÌ‹ bX
lib/libggml.so.0@89dc8912ebeb5a4a0de453c3cadc1f1384de24003f57149963c08914c756e2a2ˆ°bb
lib/libllama-bench-impl.so@8ad4bdc43b95159a245014bd49a545fedab3a0e1ba41b461cbae1970e26cb500„ba
lib/libllama-common.so.0@cac7feeeaa49b8c4192a3ea27862c02bdfe4b85236b1980ad650ceab0d11fbc9ˆÌëbg
lib/libllama-completion-impl.so@59e8e6055f661d4c41fc8f11209d72e9201dd00a84e1bdd43749466d7918b71eø€bd
lib/libllama-server-impl.so@badf84412bcf87ba5bc3cac95a7bec0cbe56cbc12cf02e1ab9c7d65c745095c9Ð¨èbZ
lib/libllama.so.0@98d7cc980f024a863b6ff44827dfb140324d351d8462c41c9a2ec2883b661dc8 ¯šbX
lib/libmtmd.so.0@45f2da48d8ee1815b245d6e7e8c0d51b5acef5a0b07f74836c0e9d2cff65531aÈÑvj 
linuxx86_646.18.44-fc-v769rbazel-bootstrap 4.2.3+ds-9yjä¾&ÃÚA„R()ÃÚA