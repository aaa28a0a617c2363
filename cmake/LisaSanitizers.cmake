# ASan+UBSan for the whole build when LISA_SANITIZE is on.
if(LISA_SANITIZE)
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=all
           -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${_san}>")
  add_link_options(${_san})
endif()

# Fuzz builds instrument everything for coverage and ASan+UBSan; the fuzz
# targets link libFuzzer's main (tests/fuzz/CMakeLists.txt).
if(LISA_FUZZ)
  set(_fz -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${_fz}>")
  add_link_options(-fsanitize=address,undefined)
endif()
