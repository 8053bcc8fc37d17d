# Writes an OpenCL C source as a C++ string constant: cmake -DIN=x.cl -DOUT=x_cl.cpp -DNAME=kX -P embed_cl.cmake
file(READ "${IN}" source)
file(WRITE "${OUT}" "// Generated from ${IN} at build time; edit the .cl file.\nnamespace tessera::ops::opencl::sources {\nextern const char* const ${NAME} = R\"tessera_cl(${source})tessera_cl\";\n}\n")
