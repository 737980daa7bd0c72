#include "diff_cli.h"

#include "cli.h"
#include "demo_model.h"
#include "exports/diff_html.h"
#include "exports/diff_json.h"
#include "exports/diff_text.h"
#include "analysis/report_diff.h"
#include "support/errors.h"

#include <algorithm>
#include <iostream>
#include <stdexcept>

namespace memledger {

namespace {

// The run options `analyze` takes, each with a value; --b-NAME gives NAME to B only.
const std::vector<std::string> kRunFlags {"--input", "--batch", "--seq", "--dtype", "--mode", "--optimizer", "--loss",
    "--threads", "--device", "--cudnn-benchmark", "--autocast", "--autocast-cache"};
const std::vector<std::string> kNotForDiff {"--png", "--snapshot", "--whatif", "--budget", "--tensors", "--depth"};

bool isRunFlag(const std::string& flag)
{
    return std::find(kRunFlags.begin(), kRunFlags.end(), flag) != kRunFlags.end();
}

RunOptions parseRun(const std::vector<std::string>& flags)
{
    std::vector<std::string> args {"analyze"};
    args.insert(args.end(), flags.begin(), flags.end());
    return parseCli(args).run;
}

std::string replaceAll(std::string s, const std::string& from, const std::string& to)
{
    for (auto at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
        s.replace(at, from.size(), to);
    return s;
}

struct Side {
    OpenedFile file;
    Report report;
};

} // namespace

CliOptions parseDiffCli(const std::vector<std::string>& args)
{
    CliOptions o;
    o.command = "diff";
    std::vector<std::string> shared, onlyB, files;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const auto& a = args[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= args.size())
                throw std::invalid_argument(a + " needs a value");
            return args[++i];
        };
        if (a == "--help" || a == "-h")
            o.help = true;
        else if (a == "--json")
            o.json = value();
        else if (a == "--html")
            o.html = value();
        else if (a == "--rows") {
            auto v = value();
            std::size_t used = 0;
            long long n = 0;
            try {
                n = std::stoll(v, &used);
            } catch (const std::exception&) {
                used = 0;
            }
            if (used != v.size() || n <= 0)
                throw std::invalid_argument("--rows must be a positive whole number, not '" + v + "'");
            o.diff_rows = static_cast<std::size_t>(n);
        } else if (a.rfind("--b-", 0) == 0) {
            auto flag = "--" + a.substr(4);
            if (!isRunFlag(flag))
                throw std::invalid_argument(a + " is not a run option for B (--b-input, --b-batch, --b-seq, --b-dtype, "
                                                "--b-mode, --b-optimizer, --b-loss, --b-threads, --b-device, "
                                                "--b-cudnn-benchmark, --b-autocast, --b-autocast-cache)");
            onlyB.push_back(flag);
            onlyB.push_back(value());
            o.diff_b_flags.push_back(a);
        } else if (isRunFlag(a)) {
            shared.push_back(a);
            shared.push_back(value());
        } else if (std::find(kNotForDiff.begin(), kNotForDiff.end(), a) != kNotForDiff.end())
            throw std::invalid_argument(a + " is for 'analyze', not 'diff'");
        else if (!a.empty() && a[0] == '-')
            throw std::invalid_argument("unknown option " + a + " for 'diff'");
        else
            files.push_back(a);
    }
    if (o.help)
        return o;
    if (files.size() != 2)
        throw std::invalid_argument("diff needs two files, A and B (" + std::to_string(files.size())
            + " given): memledger diff A B");
    o.model = files[0];
    o.model_b = files[1];
    checkOutputPath("--json", o.json, files);
    checkOutputPath("--html", o.html, files);
    o.run = parseRun(shared);
    try {
        parseRun(onlyB); // its messages name the --b- flag
    } catch (const std::invalid_argument& e) {
        std::string message = e.what();
        for (const auto& f : kRunFlags)
            message = replaceAll(message, f + " ", "--b-" + f.substr(2) + " ");
        throw std::invalid_argument(message);
    }
    auto both = shared;
    both.insert(both.end(), onlyB.begin(), onlyB.end());
    o.run_b = parseRun(both);
    return o;
}

int runDiff(const CliOptions& o)
{
    Side sides[2];
    const std::string names[2] = {o.model, o.model_b};
    const RunOptions* options[2] = {&o.run, &o.run_b};
    // Both files are opened before either runs: a bad B is told at once, not after A's run.
    for (int k = 0; k < 2; ++k) {
        try {
            // The same model file twice (two precisions of one model): opened once, run twice.
            if (k == 1 && names[1] == names[0] && sides[0].file.model)
                sides[1].file = sides[0].file;
            else
                sides[k].file = openFileOrDemo(names[k]);
        } catch (const std::exception&) {
            return failureExit(k == 0 ? "A" : "B");
        }
    }
    if (!sides[1].file.model && !o.diff_b_flags.empty())
        std::cerr << "memledger: B (" << names[1] << ") is a " << fileKindName(sides[1].file.kind)
                  << ", not a model: its --b- run options are not used\n";
    for (int k = 0; k < 2; ++k) {
        const char* which = k == 0 ? "A" : "B";
        try {
            sides[k].report = analyzeOpened(sides[k].file, *options[k]);
        } catch (const std::exception&) {
            return failureExit(which, names[k]);
        }
    }
    auto diff = diffReports(sides[0].report, sides[1].report, names[0], names[1]);
    std::cout << diffToText(diff, o.diff_rows);
    return writeOutputs(o, [&] { return diffToJson(diff).dump() + "\n"; }, [&] { return diffToHtml(diff); });
}

} // namespace memledger
