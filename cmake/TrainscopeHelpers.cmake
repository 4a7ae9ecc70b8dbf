# ts_add_test(NAME name SOURCES a.cc b.cc LIBS lib1 lib2 [LABELS l1 l2] [TIMEOUT s])
# One GoogleTest binary per module, registered with ctest as one test per binary.
function(ts_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main GTest::gmock)
  # Test code itself needs no optimisation (the libraries under test keep the build's level):
  # at -O0 a test file compiles ~1.6x faster with gcc (-O2) and ~2.2x with clang + ASan (-O1),
  # which keeps CI within its time on 2 cores.
  target_compile_options(${T_NAME} PRIVATE -O0)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "TS_SOURCE_DIR=${CMAKE_SOURCE_DIR};TS_BINARY_DIR=${CMAKE_BINARY_DIR}")
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# ts_simd_kernel(target): compiles target's sources for the SIMD level TS_SIMD names.
# simdjson's ondemand API is header-only and picks its kernel at compile time: without
# target flags it falls back to the scalar kernel (several times slower). TS_SIMD=haswell
# (AVX2, every x86 server since 2013) is the default on x86-64; westmere (SSE4.2) or none
# for older CPUs. Other architectures get their compiler's default (NEON on arm64).
set(TS_SIMD "haswell" CACHE STRING "SIMD level of the JSON readers: haswell, westmere, none")
function(ts_simd_kernel target)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    if(TS_SIMD STREQUAL "haswell")
      target_compile_options(${target} PRIVATE -mavx2 -mbmi -mbmi2 -mpclmul -mlzcnt -mpopcnt)
    elseif(TS_SIMD STREQUAL "westmere")
      target_compile_options(${target} PRIVATE -msse4.2 -mpclmul -mpopcnt)
    endif()
  endif()
endfunction()
