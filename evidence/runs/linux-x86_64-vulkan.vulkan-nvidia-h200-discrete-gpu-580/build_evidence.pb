linux-x86_64-vulkan*ª
#pypi-sdist:llama-cpp-python==0.3.36@832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e(0c1e57098bba43ac29e6e3b677cdceebdd22334f"(llama_cpp_python-0.3.36/vendor/llama.cpp2d
 0001-build-info-lane-stamp.patch@b3e0eeebb13d2b057b731ca5298e7d09357307f45ea4b7a7eebccc85a4c04e382`
0002-llama-logits-tool.patch@796f5035b50c730405c5c1f53526c867d8e339a0d3dc9176680bc0dd3b28b7552h
$0003-ggml-standalone-pkgconfig.patch@780518e19eae5f15764db45bed306faf8f3637130390b43d4cd66a5ede7564bb2f
"0004-ggml-vulkan-old-headers.patch@a2afa6aa675b96c236f30e7f7e4f02656024db3b058f2067ac136d59ea61fd84:Gsha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62bBÑ
vulkan1.3.239@vulkan_sdk//:sdk"^
libvulkan-dev==1.3.239.0-1@1a3dcf32a47524edfe5eef97bfdb0766fe656f4ae6c5e999291c6a7eb2f07655"[
libvulkan1==1.3.239.0-1@622f28b807ba55a1f5ad1622ff83aa2c5b11fedbec074850e04c10a8f28b43d3"S
glslc==2023.2-1@99b4e72225913c7aa26e3ecd0321f22679389625629a72a8398b675d5898f0e2"Y
libshaderc1==2023.2-1@8e579961637eb78cec75c6f43384436ba5bd8cd35ec3525dbf94e803e94f136d"d
 spirv-headers==1.6.1+1.3.239.0-1@0af7d53fb033dbcf0a35a2f27e5a4a609e1e2755477d4188743f3e4e3a62c760*hermetic2Ä
packagestlibvulkan-dev=1.3.239.0-1,libvulkan1=1.3.239.0-1,glslc=2023.2-1,libshaderc1=2023.2-1,spirv-headers=1.6.1+1.3.239.0-1J
CGNU12.2.0"/usr/bin/ccJ 
CXXGNU12.2.0"/usr/bin/c++Rï
vulkan_ggml
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHONf
CMAKE_EXE_LINKER_FLAGSL-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu
CMAKE_INSTALL_LIBDIRlib
CMAKE_INSTALL_RPATH$ORIGINi
CMAKE_SHARED_LINKER_FLAGSL-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu
	GGML_AVX2ON
GGML_AVXON
	GGML_BMI2ON
GGML_BUILD_COMMIT0c1e570
GGML_BUILD_EXAMPLESOFF
GGML_BUILD_TESTSOFF
	GGML_F16CON
GGML_FMAON
GGML_NATIVEOFF
GGML_RPCON
GGML_VULKANONV
SPIRV-Headers_DIRA$EXT_BUILD_ROOT/external/vulkan_sdk/usr/share/cmake/SPIRV-HeadersH
Vulkan_GLSLC_EXECUTABLE-$EXT_BUILD_ROOT/external/vulkan_sdk/bin/glslcE
Vulkan_INCLUDE_DIR/$EXT_BUILD_ROOT/external/vulkan_sdk/usr/include[
Vulkan_LIBRARYI$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu/libvulkan.so"π
	configurecmake-GNinja-S+$EXT_BUILD_ROOT/external/llama_cpp/src/ggml-B%/tmp/cmake-vulkan_ggml-6dqzhore/build>-DCMAKE_INSTALL_PREFIX=/tmp/cmake-vulkan_ggml-6dqzhore/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ONe-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu-DCMAKE_INSTALL_LIBDIR=lib-DCMAKE_INSTALL_RPATH=$ORIGINh-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu-DGGML_AVX=ON-DGGML_AVX2=ON-DGGML_BMI2=ON-DGGML_BUILD_COMMIT=0c1e570-DGGML_BUILD_EXAMPLES=OFF-DGGML_BUILD_TESTS=OFF-DGGML_F16C=ON-DGGML_FMA=ON-DGGML_NATIVE=OFF-DGGML_RPC=ON-DGGML_VULKAN=ONU-DSPIRV-Headers_DIR=$EXT_BUILD_ROOT/external/vulkan_sdk/usr/share/cmake/SPIRV-HeadersG-DVulkan_GLSLC_EXECUTABLE=$EXT_BUILD_ROOT/external/vulkan_sdk/bin/glslcD-DVulkan_INCLUDE_DIR=$EXT_BUILD_ROOT/external/vulkan_sdk/usr/includeZ-DVulkan_LIBRARY=$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu/libvulkan.soŸŒ˜S„•@"N
buildcmake--build%/tmp/cmake-vulkan_ggml-6dqzhore/build-j2∫I+7~@"K
installcmake	--install%/tmp/cmake-vulkan_ggml-6dqzhore/build)\è¬ı(¨?*cmake version 3.25.121.11.18Rù
vulkan_llama
BUILD_SHARED_LIBSON
CMAKE_BUILD_TYPERelease$
CMAKE_BUILD_WITH_INSTALL_RPATHONf
CMAKE_EXE_LINKER_FLAGSL-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu
CMAKE_INSTALL_LIBDIRlib-
CMAKE_INSTALL_RPATH$ORIGIN/../lib;$ORIGINi
CMAKE_SHARED_LINKER_FLAGSL-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu
GGML_RPCON$
LANES_LANE_IDlinux-x86_64-vulkanc
LANES_PATCH_STACK_DIGESTGsha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b
LLAMA_BUILD_COMMIT0c1e570
LLAMA_BUILD_EXAMPLESON
LLAMA_BUILD_SERVERON
LLAMA_BUILD_TESTSON
LLAMA_BUILD_TOOLSON
LLAMA_BUILD_UIOFF
LLAMA_OPENSSLOFF
LLAMA_USE_PREBUILT_UIOFF
LLAMA_USE_SYSTEM_GGMLONV
SPIRV-Headers_DIRA$EXT_BUILD_ROOT/external/vulkan_sdk/usr/share/cmake/SPIRV-HeadersH
Vulkan_GLSLC_EXECUTABLE-$EXT_BUILD_ROOT/external/vulkan_sdk/bin/glslcE
Vulkan_INCLUDE_DIR/$EXT_BUILD_ROOT/external/vulkan_sdk/usr/include[
Vulkan_LIBRARYI$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu/libvulkan.sollama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callbackggml-rpc-server"√

	configurecmake-GNinja-S&$EXT_BUILD_ROOT/external/llama_cpp/src-B&/tmp/cmake-vulkan_llama-u3mrodb4/build?-DCMAKE_INSTALL_PREFIX=/tmp/cmake-vulkan_llama-u3mrodb4/install-DBUILD_SHARED_LIBS=ON-DCMAKE_BUILD_TYPE=Release#-DCMAKE_BUILD_WITH_INSTALL_RPATH=ONe-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu-DCMAKE_INSTALL_LIBDIR=lib,-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib;$ORIGINP-DCMAKE_PREFIX_PATH=$EXT_BUILD_ROOT/bazel-out/k8-fastbuild/bin/lanes/vulkan_ggmlh-DCMAKE_SHARED_LINKER_FLAGS=-Wl,-rpath-link,$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu-DGGML_RPC=ON#-DLANES_LANE_ID=linux-x86_64-vulkanb-DLANES_PATCH_STACK_DIGEST=sha256:f543c8893690344dbba59941c18d707c864bf3a5582dd1b827b199b04aadf62b-DLLAMA_BUILD_COMMIT=0c1e570-DLLAMA_BUILD_EXAMPLES=ON-DLLAMA_BUILD_SERVER=ON-DLLAMA_BUILD_TESTS=ON-DLLAMA_BUILD_TOOLS=ON-DLLAMA_BUILD_UI=OFF-DLLAMA_OPENSSL=OFF-DLLAMA_USE_PREBUILT_UI=OFF-DLLAMA_USE_SYSTEM_GGML=ONU-DSPIRV-Headers_DIR=$EXT_BUILD_ROOT/external/vulkan_sdk/usr/share/cmake/SPIRV-HeadersG-DVulkan_GLSLC_EXECUTABLE=$EXT_BUILD_ROOT/external/vulkan_sdk/bin/glslcD-DVulkan_INCLUDE_DIR=$EXT_BUILD_ROOT/external/vulkan_sdk/usr/includeZ-DVulkan_LIBRARY=$EXT_BUILD_ROOT/external/vulkan_sdk/usr/lib/x86_64-linux-gnu/libvulkan.somÁ˚©Ò“Â?"⁄
buildcmake--build&/tmp/cmake-vulkan_llama-u3mrodb4/build-j2--targetllama-completionllama-simplellama-benchllama-serverllama-logitstest-backend-opsllama-eval-callbackggml-rpc-serverV-≤ãÄ@*cmake version 3.25.121.11.18Zllama-completionZllama-simpleZllama-benchZllama-serverZllama-logitsZtest-backend-opsZllama-eval-callbackZggml-rpc-serverb[
bin/ggml-rpc-server@a57b1a248aded9f2bd237912262b663237c7d1cc783c0e5fcda02e8da0ed7ddb–ºbW
bin/llama-bench@5b45bdb2cc8ced61b2fbdbcf4f76cb0494064bdea8c99191c0af88f2a4ee6ec5Äçb[
bin/llama-completion@ae6c278e51ceb1a8767ca9800392c9cbbeeb3e92dfd0fde1e8f2b98c0dea670e‡|b_
bin/llama-eval-callback@5be18c10da121927abd52b801f9efd3545c1b0691bd869cf294f185d533334a2ÿΩbX
bin/llama-logits@9d2b5fcf8baed6db776fb639801002b67fd95e055b848bc1dee6a208e77cfd24¿˝bX
bin/llama-server@40a72b2ba99394fe7d6bf25c48965cb6f2c112709afb270da2f485b3d32a0bebÄçbX
bin/llama-simple@7e8f3009cbc5cb198dcd95d22bc558abed40025e7e2f98e120c5671aec52cdcdÿb\
bin/test-backend-ops@097d15f7a9b47c1d3684a1585973fecf3264dfd1340c95b5674d7d85bd022acaË…Yb]
lib/libggml-base.so.0@979c44326ace376534530d84338880657a3fe2fc7492487724df39080b4c09c7Ä◊7b\
lib/libggml-cpu.so.0@4ef62ebcf8f4d9254001ed460383bbb2062ff1341d94f12ce041932e44fe52f2–ˇMb\
lib/libggml-rpc.so.0@37c02ed7dd00ef3051c1c270da4d800574df172d0d320b9eda2fddca47c1ab74Ëàb`
lib/libggml-vulkan.so.0@91e5e123e4cd07da17726e72bc0e45d42fa12c2e5361acd7a73adcab141c1817¯Ë€bX
lib/libggml.so.0@f99b84f430d9d1fb658d7128c95075cdc0f056b9a1c18554b374bf6d5058bbc6∏∞bb
lib/libllama-bench-impl.so@8ad4bdc43b95159a245014bd49a545fedab3a0e1ba41b461cbae1970e26cb500êÑba
lib/libllama-common.so.0@c718bec25d8e6a41dcd55daa8d0e690114d4bebf1c12139960e99e30268ae793àÃÎbg
lib/libllama-completion-impl.so@59e8e6055f661d4c41fc8f11209d72e9201dd00a84e1bdd43749466d7918b71e¯Äbd
lib/libllama-server-impl.so@badf84412bcf87ba5bc3cac95a7bec0cbe56cbc12cf02e1ab9c7d65c745095c9–®ËbZ
lib/libllama.so.0@98d7cc980f024a863b6ff44827dfb140324d351d8462c41c9a2ec2883b661dc8†ØöbX
lib/libmtmd.so.0@45f2da48d8ee1815b245d6e7e8c0d51b5acef5a0b07f74836c0e9d2cff65531a»—vj 
linuxx86_646.18.44-fc-v509rbazel-bootstrap 4.2.3+ds-9y‹Œ∑h√⁄AÅ”=”`k√⁄A