# lisa_add_test(NAME name SOURCES a.c ... LIBS lib ... [TIMEOUT s] [LABELS l])
# One Criterion executable per module, registered with ctest.
function(lisa_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT LISA_TESTS)
    return()
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CRITERION)
  lisa_target_relaxed(${T_NAME})
  target_compile_definitions(${T_NAME} PRIVATE
    LISA_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    LISA_BINARY_DIR="${PROJECT_BINARY_DIR}")
  # --jobs 2 keeps Criterion's parallel workers within a small CI machine.
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} --jobs 2 --full-stats
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT})
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
endfunction()

# lisa_add_unit_tests(DIR dir LIBS ...): every *_test.c in dir is a suite.
function(lisa_add_unit_tests)
  cmake_parse_arguments(U "" "DIR;PREFIX" "LIBS" ${ARGN})
  file(GLOB _tests CONFIGURE_DEPENDS ${U_DIR}/*_test.c)
  foreach(_t ${_tests})
    get_filename_component(_n ${_t} NAME_WE)
    lisa_add_test(NAME ${U_PREFIX}${_n} SOURCES ${_t} LIBS ${U_LIBS})
  endforeach()
endfunction()

# lisa_add_pytest(NAME name FILE path [TIMEOUT s]): a pytest file run by
# ctest with the test environment's python (LISA_PYTHON, set by
# scripts/test.sh). Binaries are found through LISA_BINARY_DIR.
set(LISA_PYTHON "" CACHE FILEPATH "python of the test environment")
function(lisa_add_pytest)
  cmake_parse_arguments(P "" "NAME;FILE;TIMEOUT" "" ${ARGN})
  if(NOT LISA_TESTS OR NOT LISA_PYTHON)
    return()
  endif()
  add_test(NAME ${P_NAME}
           COMMAND ${LISA_PYTHON} -m pytest -q -p no:cacheprovider ${P_FILE}
           WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  if(NOT P_TIMEOUT)
    set(P_TIMEOUT 600)
  endif()
  set_tests_properties(${P_NAME} PROPERTIES TIMEOUT ${P_TIMEOUT}
    ENVIRONMENT "LISA_SOURCE_DIR=${PROJECT_SOURCE_DIR};LISA_BINARY_DIR=${PROJECT_BINARY_DIR}")
endfunction()
