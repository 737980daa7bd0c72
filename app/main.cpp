#include "cli.h"

#include <exception>
#include <iostream>

#ifndef MEMLEDGER_VERSION
#define MEMLEDGER_VERSION "0"
#endif

int main(int argc, char** argv)
{
    using namespace memledger;
    CliOptions options;
    try {
        options = parseCli(std::vector<std::string>(argv + 1, argv + argc));
    } catch (const std::exception& e) {
        std::cerr << "memledger: " << e.what() << "\n\n" << usageText();
        return kExitUsage;
    }
    if (options.help) {
        std::cout << usageText();
        return kExitOk;
    }
    if (options.version) {
        std::cout << "memledger " MEMLEDGER_VERSION "\n";
        return kExitOk;
    }
    try {
        return runCli(options);
    } catch (const std::exception& e) {
        std::cerr << "memledger: unexpected error: " << e.what() << "\n";
        return kExitRunFailed;
    }
}
