// TEMPORARY STUB (being written): the msa command.
#include <cstdio>
int main() { std::puts("msa: being written"); return 1; }
