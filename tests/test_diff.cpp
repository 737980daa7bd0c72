// Comparing two recordings (analysis/report_diff.h, `memledger diff`, File > Compare with...), checked against
// what PyTorch and Python's pickle say: real runs of a small model at float32 and bfloat16, a model before
// and after a change, a run against itself, and two real CUDA snapshots.
#include "run_command.h"

#include "exports/diff_html.h"
#include "exports/diff_json.h"
#include "exports/diff_text.h"
#include "exports/report_json.h"
#include "analysis/report_diff.h"
#include "session/open_file.h"
#include "support/atomic_file.h"

#ifdef MEMLEDGER_HAS_GUI
#include "diff_view.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "run_panel.h"
#include "timeline_plot.h"

#include <qcustomplot.h>

#include <QElapsedTimer>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#endif

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <unistd.h>

using namespace memledger;
using namespace memledger::test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

// Writes two TorchScript models (a small CNN, and the same CNN "after a fix": a narrower conv2, a new head
// module, no bn1) and what PyTorch itself says of them: per module, the bytes of the state_dict entries under
// it at float32 and after .to(torch.bfloat16); the input's bytes; and the peak of torch.profiler's [memory]
// events over an inference run at each precision (after a warm-up, graph-executor optimisation off, as
// memledger runs).
const char* kTruthScript = R"PY(
import json, os, sys
import torch, torch.nn as nn, torch.nn.functional as F

out = sys.argv[1]
torch.manual_seed(0)

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        return self.fc(torch.flatten(x, 1))

class Fixed(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 8 * 8, 10)
        self.head = nn.Linear(10, 4)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(self.conv2(x), 2)
        return self.head(self.fc(torch.flatten(x, 1)))

def module_bytes(m):
    sd = m.state_dict()
    out = {}
    for name, _ in m.named_modules():
        prefix = name + "." if name else ""
        out[name] = sum(t.numel() * t.element_size() for k, t in sd.items() if k.startswith(prefix))
    return out

def profiler_peak(m, x):
    with torch.no_grad():
        m(x)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            y = m(x)
            del y
    live = peak = 0
    for e in prof.profiler.kineto_results.events():
        if e.name() == "[memory]":
            live += e.nbytes()
            peak = max(peak, live)
    return peak

torch._C._set_graph_executor_optimize(False)
truth = {"input": [1, 3, 32, 32]}
for name, cls in (("net", Net), ("fixed", Fixed)):
    path = os.path.join(out, name + ".pt")
    torch.jit.save(torch.jit.script(cls().eval()), path)
    entry = {}
    for dtype in ("float32", "bfloat16"):
        m = torch.jit.load(path).eval()
        if dtype == "bfloat16":
            m = m.to(torch.bfloat16)
        x = torch.randn(1, 3, 32, 32).to(getattr(torch, dtype))
        entry[dtype] = {"modules": module_bytes(m), "input_bytes": x.numel() * x.element_size(),
                        "peak_bytes": profiler_peak(m, x)}
    entry["parameter_bytes"] = sum(p.numel() * p.element_size() for p in torch.jit.load(path).parameters())
    truth[name] = entry
json.dump(truth, open(os.path.join(out, "truth.json"), "w"), indent=1)
)PY";

// What Python's pickle reads from a CUDA snapshot: reserved (the segments' total_size), the trace's alloc
// entries (count and bytes, all devices), and what was alive before the trace (tests/range_truths.py's rule).
const char* kSnapshotScript = R"PY(
import json, pickle, sys
sys.path.insert(0, ")PY" MEMLEDGER_SOURCE_DIR R"PY(/tests")
from range_truths import alive_before
out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        d = pickle.load(f)
    segments = d if isinstance(d, list) else d.get("segments", [])
    traces = [] if isinstance(d, list) else d.get("device_traces", [])
    allocs = [e for t in traces for e in t if e["action"] == "alloc"]
    out[path] = {"reserved": sum(s["total_size"] for s in segments),
                 "allocated": sum(e["size"] for e in allocs), "allocations": len(allocs),
                 "alive_before": alive_before(segments, traces)}
print(json.dumps(out))
)PY";

const char* kPython = MEMLEDGER_PYTHON; // the Python whose torch is this build's libtorch

struct Truths {
    fs::path dir;
    json truth;
    std::string error;
};

const Truths& truths()
{
    static Truths t = [] {
        Truths t;
        t.dir = fs::temp_directory_path() / ("memledger-test-diff-" + std::to_string(::getpid()));
        fs::create_directories(t.dir);
        auto script = t.dir / "truth.py";
        std::ofstream(script) << kTruthScript;
        auto r = runCommand(std::string(kPython) + " '" + script.string() + "' '" + t.dir.string() + "'");
        if (r.exit_code != 0) {
            t.error = "the truth script failed: " + r.output;
            return t;
        }
        std::ifstream in(t.dir / "truth.json");
        t.truth = json::parse(in);
        return t;
    }();
    // The models and files the tests write go when the test program ends.
    static struct RemoveAtExit {
        fs::path dir;
        ~RemoveAtExit()
        {
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    } cleanup {t.dir};
    return t;
}

std::string modelPath(const std::string& name)
{
    return (truths().dir / (name + ".pt")).string();
}

#define NEED_TRUTHS()                                                                                                  \
    do {                                                                                                               \
        if (!truths().error.empty())                                                                                   \
            FAIL() << truths().error;                                                                                  \
    } while (0)

Report run(const std::string& name, const std::string& dtype)
{
    auto file = openFile(modelPath(name));
    RunOptions o;
    o.inputs = {{1, 3, 32, 32}};
    o.dtype = dtype;
    o.mode = RunMode::Inference;
    return analyzeOpened(file, o);
}

std::int64_t truthModule(const std::string& model, const std::string& dtype, const std::string& path)
{
    return truths().truth[model][dtype]["modules"][path].get<std::int64_t>();
}

bool allZero(const DiffEntry& e)
{
    for (const auto& f : e.figures)
        if (f.delta() != 0)
            return false;
    return true;
}

bool sortedLargestFirst(const ReportDiff& d)
{
    for (std::size_t i = 1; i < d.entries.size(); ++i)
        if (std::llabs(d.entries[i - 1].change) < std::llabs(d.entries[i].change))
            return false;
    return true;
}

std::string snapshot(const std::string& name)
{
    return std::string(MEMLEDGER_SNAPSHOTS) + "/" + name;
}

#define SKIP_WITHOUT_SNAPSHOTS()                                                                                       \
    if (!fs::exists(MEMLEDGER_SNAPSHOTS))                                                                              \
    GTEST_SKIP() << "the shared snapshots folder " MEMLEDGER_SNAPSHOTS " is absent: snapshot comparison skipped"

std::string readText(const fs::path& p)
{
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

} // namespace

TEST(Diff, Float32AgainstBfloat16MatchesPyTorchsBytes)
{
    NEED_TRUTHS();
    auto a = run("net", "float32");
    auto b = run("net", "bfloat16");
    auto d = diffReports(a, b, "net.pt", "net.pt");
    const auto& tr = truths().truth["net"];

    // Weights: every parameter and buffer (BatchNorm's running stats convert too, num_batches_tracked stays int64).
    auto w = d.total("weight_bytes")->figure;
    EXPECT_EQ(w.a, truthModule("net", "float32", ""));
    EXPECT_EQ(w.b, truthModule("net", "bfloat16", ""));
    EXPECT_EQ(w.delta(), truthModule("net", "bfloat16", "") - truthModule("net", "float32", ""));
    ASSERT_NE(d.ledger(Ledger::Weights), nullptr);
    EXPECT_EQ(d.ledger(Ledger::Weights)->at_peak.delta(), w.delta());
    // Inputs.
    EXPECT_EQ(d.total("input_bytes")->figure.delta(),
        tr["bfloat16"]["input_bytes"].get<std::int64_t>() - tr["float32"]["input_bytes"].get<std::int64_t>());
    // Per module, matched by path: each module's weights delta is PyTorch's.
    EXPECT_EQ(d.entry_kind, DiffEntryKind::Module);
    for (const auto& [path, bytes] : tr["float32"]["modules"].items()) {
        const auto* e = d.entry(path);
        ASSERT_NE(e, nullptr) << path;
        EXPECT_TRUE(e->in_a && e->in_b) << path;
        EXPECT_EQ(e->figures[0].a, bytes.get<std::int64_t>()) << path;
        EXPECT_EQ(e->figures[0].delta(), truthModule("net", "bfloat16", path) - bytes.get<std::int64_t>()) << path;
    }
    // The run's peak moves as torch.profiler's peak moves between the two precisions.
    EXPECT_EQ(d.total("peak_bytes")->figure.a, tr["float32"]["peak_bytes"].get<std::int64_t>());
    EXPECT_EQ(d.total("peak_bytes")->figure.b, tr["bfloat16"]["peak_bytes"].get<std::int64_t>());
    EXPECT_LT(d.total("peak_total_bytes")->figure.delta(), 0);
    EXPECT_TRUE(sortedLargestFirst(d));
    // The same graph at two precisions: the timelines share the op axis.
    EXPECT_EQ(d.axis, TimelineAxis::OpSequence) << d.axis_reason;
    EXPECT_EQ(d.series_a.peak_value, static_cast<double>(a.peak_total_bytes));
    EXPECT_EQ(d.series_b.peak_value, static_cast<double>(b.peak_total_bytes));
    EXPECT_EQ(d.series_a.keys.size(), a.trace->size() + 1);
}

TEST(Diff, ARunAgainstItselfAndAgainstASecondRunIsAllZero)
{
    NEED_TRUTHS();
    auto a = run("net", "float32");
    auto again = run("net", "float32");
    for (const auto* b : {&a, &again}) {
        auto d = diffReports(a, *b);
        for (const auto& t : d.totals)
            EXPECT_EQ(t.figure.delta(), 0) << t.name;
        for (const auto& l : d.ledgers) {
            EXPECT_EQ(l.at_peak.delta(), 0) << ledgerName(l.ledger);
            EXPECT_EQ(l.total.delta(), 0) << ledgerName(l.ledger);
        }
        EXPECT_EQ(d.changedEntries(), 0u);
        for (const auto& e : d.entries) {
            EXPECT_TRUE(allZero(e)) << e.key;
            EXPECT_TRUE(e.in_a && e.in_b) << e.key;
        }
        EXPECT_EQ(d.entries.size(), a.layers.size());
        EXPECT_EQ(d.axis, TimelineAxis::OpSequence);
        EXPECT_NE(diffToText(d).find("none: every entry is the same"), std::string::npos);
    }
}

TEST(Diff, BeforeAndAfterAChangeListsAddedRemovedAndChangedModules)
{
    NEED_TRUTHS();
    auto a = run("net", "float32");
    auto b = run("fixed", "float32");
    auto d = diffReports(a, b, "net.pt", "fixed.pt");
    const auto& ta = truths().truth["net"]["float32"]["modules"];
    const auto& tb = truths().truth["fixed"]["float32"]["modules"];
    for (const auto* side : {&ta, &tb})
        for (const auto& [path, bytes] : side->items()) {
            const auto* e = d.entry(path);
            ASSERT_NE(e, nullptr) << path;
            EXPECT_EQ(e->in_a, ta.contains(path)) << path;
            EXPECT_EQ(e->in_b, tb.contains(path)) << path;
            std::int64_t wa = ta.contains(path) ? ta[path].get<std::int64_t>() : 0;
            std::int64_t wb = tb.contains(path) ? tb[path].get<std::int64_t>() : 0;
            EXPECT_EQ(e->figures[0].delta(), wb - wa) << path;
        }
    EXPECT_STREQ(d.entry("head")->status(), "added");
    EXPECT_STREQ(d.entry("bn1")->status(), "removed");
    EXPECT_EQ(d.total("weight_bytes")->figure.delta(), tb[""].get<std::int64_t>() - ta[""].get<std::int64_t>());
    EXPECT_TRUE(sortedLargestFirst(d));
    // Different graphs (no BatchNorm after conv1 in B): the timelines share the time axis, and say why.
    EXPECT_EQ(d.axis, TimelineAxis::Milliseconds);
    EXPECT_NE(d.axis_reason.find("aten::batch_norm in A"), std::string::npos) << d.axis_reason;
    auto text = diffToText(d);
    EXPECT_NE(text.find("head (added)"), std::string::npos) << text;
    EXPECT_NE(text.find("bn1 (removed)"), std::string::npos) << text;
}

TEST(Diff, TwoSnapshotsAgreeWithPythonsPickle)
{
    SKIP_WITHOUT_SNAPSHOTS();
    const std::string a = snapshot("tiny-segment-alloc.pickle"), b = snapshot("many-segments.pickle");
    auto script = fs::temp_directory_path() / ("memledger-test-diff-snap-" + std::to_string(::getpid()) + ".py");
    std::ofstream(script) << kSnapshotScript;
    auto r = runCommand(std::string(kPython) + " '" + script.string() + "' '" + a + "' '" + b + "'");
    fs::remove(script);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto truth = json::parse(r.output.substr(r.output.find('{')));
    const auto& pa = truth[a];
    const auto& pb = truth[b];

    auto ra = openFile(a), rb = openFile(b);
    auto d = diffReports(*ra.report, *rb.report);
    auto reserved = d.total("reserved_bytes")->figure;
    EXPECT_EQ(reserved.a, pa["reserved"].get<std::int64_t>());
    EXPECT_EQ(reserved.b, pb["reserved"].get<std::int64_t>());
    EXPECT_EQ(reserved.delta(), pb["reserved"].get<std::int64_t>() - pa["reserved"].get<std::int64_t>());
    // The memory alive before the trace is a figure of its own.
    ASSERT_TRUE(d.total("alive_before_trace_bytes"));
    EXPECT_EQ(d.total("alive_before_trace_bytes")->figure.a, pa["alive_before"].get<std::int64_t>());
    EXPECT_EQ(d.total("alive_before_trace_bytes")->figure.b, pb["alive_before"].get<std::int64_t>());
    // One set of ledger rows, the snapshot's ledgers, no row overlapping them: at the peak, resident included, they
    // sum to the peak; allocated, all but resident sum to what the trace allocated. The table says so.
    EXPECT_FALSE(d.ledgers_sum.empty());
    DiffFigure atPeak, allocated;
    std::set<Ledger> seen;
    for (const auto& l : d.ledgers) {
        EXPECT_TRUE(seen.insert(l.ledger).second) << l.label;
        EXPECT_EQ(l.label, ledgerLabel(l.ledger));
        atPeak.a += l.at_peak.a;
        atPeak.b += l.at_peak.b;
        if (l.ledger != Ledger::Resident) {
            allocated.a += l.total.a;
            allocated.b += l.total.b;
        }
    }
    EXPECT_EQ(atPeak.a, ra.report->peak_bytes);
    EXPECT_EQ(atPeak.b, rb.report->peak_bytes);
    EXPECT_EQ(allocated.a, pa["allocated"].get<std::int64_t>());
    EXPECT_EQ(allocated.b, pb["allocated"].get<std::int64_t>());
    // Per allocation site: the sites' sums are the pickle's sums, each side.
    EXPECT_EQ(d.entry_kind, DiffEntryKind::Site);
    std::int64_t sumA = 0, sumB = 0, countA = 0, countB = 0, deltas = 0;
    for (const auto& e : d.entries) {
        sumA += e.figures[0].a;
        sumB += e.figures[0].b;
        countA += e.figures[2].a;
        countB += e.figures[2].b;
        deltas += e.figures[0].delta();
    }
    EXPECT_EQ(sumA, pa["allocated"].get<std::int64_t>());
    EXPECT_EQ(sumB, pb["allocated"].get<std::int64_t>());
    EXPECT_EQ(countA, pa["allocations"].get<std::int64_t>());
    EXPECT_EQ(countB, pb["allocations"].get<std::int64_t>());
    EXPECT_EQ(deltas, pb["allocated"].get<std::int64_t>() - pa["allocated"].get<std::int64_t>());
    EXPECT_TRUE(sortedLargestFirst(d));
    EXPECT_EQ(d.axis, TimelineAxis::Milliseconds);

    // A snapshot against itself: nothing changed.
    auto same = diffReports(*rb.report, *rb.report);
    EXPECT_EQ(same.changedEntries(), 0u);
    for (const auto& t : same.totals)
        EXPECT_EQ(t.figure.delta(), 0) << t.name;
}

TEST(Diff, TrainingStepsWithSgdAndAdamDifferByOneMomentPerParameter)
{
    NEED_TRUTHS();
    auto file = openFile(modelPath("net"));
    RunOptions o;
    o.inputs = {{4, 3, 32, 32}};
    o.mode = RunMode::Train;
    o.optimizer = "sgd";
    auto a = analyzeOpened(file, o);
    o.optimizer = "adam";
    auto b = analyzeOpened(file, o);
    auto d = diffReports(a, b);
    // SGD keeps one momentum tensor per parameter, Adam two moments (exp_avg, exp_avg_sq): one more.
    const auto params = truths().truth["net"]["parameter_bytes"].get<std::int64_t>();
    EXPECT_EQ(d.total("optimizer_state_bytes")->figure.delta(), params);
    ASSERT_NE(d.ledger(Ledger::OptimizerState), nullptr);
    EXPECT_EQ(d.ledger(Ledger::OptimizerState)->at_peak.delta(), params);
    EXPECT_EQ(d.total("gradient_bytes")->figure.delta(), 0);
    EXPECT_EQ(d.total("weight_bytes")->figure.delta(), 0);
    // A training step adds the saved and gradient columns.
    bool saved = false;
    for (const auto& c : d.columns)
        saved = saved || c.name == "saved_activation_bytes";
    EXPECT_TRUE(saved);
}

TEST(DiffCli, DtypeForBOnlyWritesJsonAndHtml)
{
    NEED_TRUTHS();
    auto json = truths().dir / "diff.json";
    auto html = truths().dir / "diff.html";
    auto model = modelPath("net");
    auto r = runCommand(memledgerBinary() + " diff '" + model + "' '" + model + "' --input 1x3x32x32 --b-dtype bfloat16"
        + " --json '" + json.string() + "' --html '" + html.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("Modules, largest change first"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("model, bfloat16, batch 1"), std::string::npos) << r.output;
    std::ifstream in(json);
    auto j = json::parse(in);
    EXPECT_EQ(j["format"], "memledger-diff");
    EXPECT_EQ(j["version"], 1);
    EXPECT_EQ(j["a"]["dtype"], "float32");
    EXPECT_EQ(j["b"]["dtype"], "bfloat16");
    EXPECT_EQ(j["totals"]["weight_bytes"]["delta"].get<std::int64_t>(),
        truthModule("net", "bfloat16", "") - truthModule("net", "float32", ""));
    EXPECT_EQ(j["totals"]["peak_bytes"]["b"].get<std::int64_t>(),
        truths().truth["net"]["bfloat16"]["peak_bytes"].get<std::int64_t>());
    EXPECT_EQ(j["entries"]["kind"], "module");
    EXPECT_EQ(j["entries"]["columns"][0]["name"], "weight_bytes");
    const auto& rows = j["entries"]["rows"];
    ASSERT_FALSE(rows.empty());
    for (std::size_t i = 1; i < rows.size(); ++i)
        EXPECT_GE(std::llabs(rows[i - 1]["change"].get<std::int64_t>()), std::llabs(rows[i]["change"].get<std::int64_t>()));
    EXPECT_EQ(j["timeline"]["axis"], "op");
    EXPECT_FALSE(j["timeline"]["a"]["x"].empty());
    EXPECT_EQ(j["timeline"]["a"]["x"].size(), j["timeline"]["a"]["y"].size());
    EXPECT_EQ(j["timeline"]["b"]["peak_y"].get<double>(),
        static_cast<double>(j["totals"]["peak_total_bytes"]["b"].get<std::int64_t>()));
    auto page = readText(html);
    EXPECT_NE(page.find("<svg"), std::string::npos);
    EXPECT_EQ(page.find("<script"), std::string::npos); // self-contained, no script
    EXPECT_NE(page.find("stroke=\"#4c72b0\""), std::string::npos); // A's curve
    EXPECT_NE(page.find("stroke=\"#dd8452\""), std::string::npos); // B's curve
    EXPECT_NE(page.find("conv2"), std::string::npos);
}

TEST(DiffCli, TwoSavedReportsCompareLikeTheirRuns)
{
    NEED_TRUTHS();
    auto model = modelPath("net");
    auto a = truths().dir / "a.json", b = truths().dir / "b.json", out = truths().dir / "reports-diff.json";
    for (const auto& [dtype, path] : {std::pair {"float32", a}, std::pair {"bfloat16", b}}) {
        auto r = runCommand(memledgerBinary() + " analyze '" + model + "' --input 1x3x32x32 --dtype " + dtype
            + " --json '" + path.string() + "'");
        ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    auto r = runCommand(memledgerBinary() + " diff '" + a.string() + "' '" + b.string() + "' --json '" + out.string() + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(out);
    auto j = json::parse(in);
    EXPECT_EQ(j["a"]["source"], "model");
    EXPECT_EQ(j["totals"]["weight_bytes"]["delta"].get<std::int64_t>(),
        truthModule("net", "bfloat16", "") - truthModule("net", "float32", ""));
    EXPECT_EQ(j["timeline"]["axis"], "op");
}

TEST(DiffCli, ErrorsNameTheFileAndExitAsTheReadmeSays)
{
    NEED_TRUTHS();
    auto model = modelPath("net");
    const std::string bin = memledgerBinary() + " diff ";
    auto one = runCommand(bin + "'" + model + "'");
    EXPECT_EQ(one.exit_code, 2) << one.output;
    EXPECT_NE(one.output.find("two files"), std::string::npos) << one.output;

    auto missing = (truths().dir / "missing.pt").string();
    auto bad = runCommand(bin + "'" + model + "' '" + missing + "' --input 1x3x32x32");
    EXPECT_EQ(bad.exit_code, 3) << bad.output;
    EXPECT_NE(bad.output.find("B: " + missing + ": no such file"), std::string::npos) << bad.output;

    auto zero = runCommand(bin + "'" + model + "' '" + model + "' --b-batch 0");
    EXPECT_EQ(zero.exit_code, 2) << zero.output;
    EXPECT_NE(zero.output.find("--b-batch must be a positive whole number"), std::string::npos) << zero.output;

    auto unknown = runCommand(bin + "'" + model + "' '" + model + "' --b-json x");
    EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
    auto png = runCommand(bin + "'" + model + "' '" + model + "' --png x.png");
    EXPECT_EQ(png.exit_code, 2) << png.output;
    EXPECT_NE(png.output.find("--png is for 'analyze'"), std::string::npos) << png.output;

    // B's run fails (an input with 5 channels for a 3-channel convolution), and the message says it is B.
    auto half = runCommand(bin + "'" + model + "' '" + model + "' --input 1x3x32x32 --b-input 1x5x32x32");
    EXPECT_EQ(half.exit_code, 4) << half.output;
    EXPECT_NE(half.output.find("B: " + model + ":"), std::string::npos) << half.output;
    EXPECT_EQ(half.output.find("terminate called"), std::string::npos) << half.output;
}

#ifdef MEMLEDGER_HAS_GUI

namespace {

template <typename Sender, typename Signal>
bool waitFor(Sender* sender, Signal signal, int ms = 120000)
{
    QSignalSpy spy(sender, signal);
    QElapsedTimer clock;
    clock.start();
    while (spy.isEmpty() && clock.elapsed() < ms)
        spy.wait(100);
    return !spy.isEmpty();
}

} // namespace

TEST(DiffView, ShowsBothCurvesAndTheChangedModules)
{
    NEED_TRUTHS();
    qtTestApp();
    auto d = std::make_shared<const ReportDiff>(diffReports(run("net", "float32"), run("fixed", "float32")));
    DiffView view;
    view.resize(1200, 700);
    view.setDiff(d);
    view.show();
    QCoreApplication::processEvents();
    EXPECT_GT(view.graphA()->dataCount(), 2);
    EXPECT_GT(view.graphB()->dataCount(), 2);
    EXPECT_EQ(view.entriesTable()->rowCount(), static_cast<int>(d->changedEntries()));
    // Sorted by the size of the change, as the diff is.
    EXPECT_EQ(view.entriesTable()->item(0, 0)->text().toStdString(), d->entries.front().label);
    bool head = false;
    for (int r = 0; r < view.entriesTable()->rowCount(); ++r)
        head = head || view.entriesTable()->item(r, 0)->text() == QStringLiteral("head (added)");
    EXPECT_TRUE(head);
    EXPECT_GT(view.totalsTable()->rowCount(), 3);
    // Zooming in keeps both curves inside the view and reduced to it.
    view.plot()->xAxis->setRange(d->series_a.keys.back() / 4, d->series_a.keys.back() / 2);
    QCoreApplication::processEvents();
    EXPECT_GT(view.graphA()->dataCount(), 0);
    view.resetZoom();
    EXPECT_DOUBLE_EQ(view.plot()->xAxis->range().lower, std::min(d->series_a.keys.front(), d->series_b.keys.front()));
}

TEST(DiffWindow, CompareWithShowsTheComparisonAndClosesBack)
{
    NEED_TRUTHS();
    qtTestApp();
    // B: the same model's bfloat16 run, saved as a report.
    auto b = truths().dir / "window-b.json";
    writeFileAtomically(b.string(), reportToJson(run("net", "bfloat16")).dump());
    MainWindow w;
    w.show();
    // The model's input cannot be guessed (its first Conv2d suggests 224x224): the run fails, then runs with
    // the shape given in the run panel, as a user does it.
    QSignalSpy failedRun(&w, &MainWindow::runFailed);
    w.openFile(QString::fromStdString(modelPath("net")));
    ASSERT_TRUE(waitFor(&w, &MainWindow::runFailed));
    w.runPanel()->setInputs(QStringLiteral("1x3x32x32"), QString());
    w.startRun();
    ASSERT_TRUE(waitFor(&w, &MainWindow::reportChanged)) << w.errorText().toStdString();
    w.compareWith(QString::fromStdString(b.string()));
    ASSERT_TRUE(waitFor(&w, &MainWindow::comparisonShown)) << w.errorText().toStdString();
    ASSERT_TRUE(w.isComparing());
    const auto& d = w.diffView()->diff();
    ASSERT_TRUE(d);
    EXPECT_EQ(d->total("weight_bytes")->figure.delta(),
        truthModule("net", "bfloat16", "") - truthModule("net", "float32", ""));
    EXPECT_EQ(d->b.dtype, "bfloat16");
    QCoreApplication::processEvents();
    EXPECT_TRUE(w.diffView()->isVisible());
    EXPECT_FALSE(w.timeline()->isVisible());
    EXPECT_FALSE(w.runPanel()->isVisible()); // the side panels make room, and come back with A
    w.diffView()->closeButton()->click();
    QCoreApplication::processEvents();
    EXPECT_FALSE(w.isComparing());
    EXPECT_TRUE(w.timeline()->isVisible());
    EXPECT_TRUE(w.runPanel()->isVisible());
    EXPECT_FALSE(w.diffView()->isVisible());

    // A file that cannot be read: a message naming it, and the window stays as it was.
    auto missing = (truths().dir / "nothing-here.pt").string();
    QSignalSpy failed(&w, &MainWindow::comparisonFailed);
    w.compareWith(QString::fromStdString(missing));
    ASSERT_TRUE(failed.wait(30000));
    EXPECT_TRUE(w.errorText().contains(QString::fromStdString(missing))) << w.errorText().toStdString();
    EXPECT_FALSE(w.isComparing());
    EXPECT_TRUE(w.report() != nullptr);
}

#endif
