# The picky warning set for lisa's own code (generated code gets a relaxed one).
set(LISA_PICKY_WARNINGS
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion
  -Wstrict-prototypes -Wmissing-prototypes -Wmissing-declarations
  -Wold-style-definition -Wpointer-arith -Wcast-qual -Wwrite-strings
  -Wformat=2 -Wundef -Wvla -Wdouble-promotion -Wimplicit-fallthrough
  -Wredundant-decls -Wnested-externs -fno-common)
if(LISA_WERROR)
  list(APPEND LISA_PICKY_WARNINGS -Werror)
endif()

# lisa_target_picky(target): apply the picky set and the POSIX feature macro.
function(lisa_target_picky target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:${LISA_PICKY_WARNINGS}>)
  target_compile_definitions(${target} PRIVATE _POSIX_C_SOURCE=200809L)
endfunction()

# lisa_target_relaxed(target): for generated code and test files that
# include third-party macros (Criterion) which trip the picky set.
function(lisa_target_relaxed target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wno-unused-parameter>)
  target_compile_definitions(${target} PRIVATE _POSIX_C_SOURCE=200809L)
endfunction()
