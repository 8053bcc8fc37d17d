# Writes a text file as a C++ string constant:
#   cmake -DIN=x.cl -DOUT=x.cpp -DNAME=kX -DNAMESPACE=tessera::foo -P embed_text.cmake
file(READ "${IN}" source)
file(WRITE "${OUT}" "// Generated from ${IN} at build time; edit that file.\nnamespace ${NAMESPACE} {\nextern const char* const ${NAME};\nconst char* const ${NAME} = R\"tessera_text(${source})tessera_text\";\n}\n")
