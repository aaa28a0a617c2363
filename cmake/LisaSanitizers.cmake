# ASan+UBSan for the whole build when LISA_SANITIZE is on.
if(LISA_SANITIZE)
  set(_san -fsanitize=address,undefined -fno-sanitize-recover=all
           -fno-omit-frame-pointer)
  add_compile_options($<$<COMPILE_LANGUAGE:C>:${_san}>)
  add_link_options(${_san})
endif()
