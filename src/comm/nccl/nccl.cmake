# NCCL backend: compiled when the CUDA toolkit headers and NCCL are found (TS_WITH_NCCL AUTO
# or ON). libcudart/libnccl are dlopen()ed at run time, so nothing links against CUDA.
if(NOT TS_WITH_NCCL STREQUAL "OFF")
  find_path(TS_CUDA_INCLUDE cuda_runtime_api.h
    HINTS ENV CUDA_HOME PATH_SUFFIXES include PATHS /usr/local/cuda/include)
  find_path(TS_NCCL_INCLUDE nccl.h HINTS ${TS_CUDA_INCLUDE} PATHS /usr/local/cuda/include /usr/include)
  find_library(TS_NCCL_LIBRARY nccl PATHS /usr/local/cuda/lib /usr/local/cuda/lib64
    /usr/local/cuda/targets/x86_64-linux/lib)
  find_library(TS_CUDART_LIBRARY cudart PATHS /usr/local/cuda/lib64 /usr/local/cuda/lib
    /usr/local/cuda/targets/x86_64-linux/lib)
  if(TS_CUDA_INCLUDE AND TS_NCCL_INCLUDE AND TS_NCCL_LIBRARY AND TS_CUDART_LIBRARY)
    get_filename_component(ts_nccl_dir ${TS_NCCL_LIBRARY} DIRECTORY)
    get_filename_component(ts_cudart_dir ${TS_CUDART_LIBRARY} DIRECTORY)
    add_library(ts_comm_nccl ${CMAKE_CURRENT_LIST_DIR}/nccl_backend.cc)
    target_include_directories(ts_comm_nccl SYSTEM PRIVATE ${TS_CUDA_INCLUDE} ${TS_NCCL_INCLUDE})
    target_compile_definitions(ts_comm_nccl PRIVATE TS_NCCL_LIB_DIR="${ts_nccl_dir}"
      TS_CUDART_LIB_DIR="${ts_cudart_dir}")
    target_link_libraries(ts_comm_nccl PUBLIC ts_comm_base ${CMAKE_DL_LIBS})
    target_link_libraries(ts_comm PUBLIC ts_comm_nccl)
    target_compile_definitions(ts_comm PRIVATE TS_COMM_HAVE_NCCL=1)
    message(STATUS "comm: NCCL backend built (${TS_NCCL_INCLUDE}, loads ${TS_NCCL_LIBRARY} at run time)")
  elseif(TS_WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "TS_WITH_NCCL=ON but the CUDA toolkit headers or NCCL were not found")
  else()
    message(STATUS "comm: CUDA toolkit or NCCL not found, nccl backend not built")
  endif()
endif()
