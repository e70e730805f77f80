#include "src/cli/app.h"

#include <iostream>

int main(int argc, char** argv) { return gpubench::cli::run_cli(argc, argv, std::cout, std::cerr); }
