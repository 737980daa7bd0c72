// The window's Generate run: a file memledger.export saved with generate=True offers "generate" in the Run panel's
// mode box, with its New tokens row; the run shows the prefill and decode phases and the KV cache ledger, with the
// same figures as `memledger analyze --mode generate` (with the static cache too), the What if panel holds no other
// run's rows, and with a budget the GPUs tab says how many sequences of the run's length fit when serving.
#include "fixture_paths.h"
#include "gpu_fit_view.h"
#include "main_window.h"
#include "qt_test_app.h"
#include "recording/build_report.h"
#include "recording/model.h"
#include "run_command.h"
#include "run_panel.h"
#include "truth_file.h"
#include "whatif_panel.h"
#include "window_wait.h"

#include <QComboBox>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <fstream>

#include <gtest/gtest.h>

using namespace memledger;
using memledger::test::fixture;

TEST(GenerateWindow, TheRunPanelGeneratesWithTheKvCache)
{
    const auto truth = memledger::test::readTruth("generate_truths.json", "make_generate_truths");
    SKIP_IF_TRUTH_IS_NOT_HERE(truth, true);
    qtTestApp();
    MainWindow w;
    ASSERT_TRUE(openAndWait(w, QString::fromStdString(fixture("gen_llama_gqa.pt2"))));
    auto* panel = w.runPanel();
    const int generate = panel->modeBox()->findData(QStringLiteral("generate"));
    ASSERT_GE(generate, 0) << "the mode box offers generate for a file with the generation programs";
    EXPECT_FALSE(panel->newTokensRowVisible());
    panel->modeBox()->setCurrentIndex(generate);
    EXPECT_TRUE(panel->newTokensRowVisible());
    EXPECT_FALSE(panel->trainingRowVisible());
    panel->setInputs(QStringLiteral("2x64:int64"), QString());
    panel->setNewTokens(16);
    panel->runButton()->click();
    ASSERT_TRUE(waitForReport(w));
    const auto report = w.report();
    ASSERT_TRUE(report);
    EXPECT_EQ(report->run.mode, RunMode::Generate);
    EXPECT_EQ(report->run.new_tokens, 16);
    EXPECT_TRUE(findPhase(report->phases, "prefill") && findPhase(report->phases, "decode"));
    EXPECT_GT(report->ledgers[static_cast<std::size_t>(Ledger::KvCache)].max, 0);
    // the same run as the command line's
    auto model = Model::open(fixture("gen_llama_gqa.pt2"));
    RunOptions o;
    o.inputs = {{2, 64}};
    o.input_types = {InputType {}};
    o.input_types.front().dtype = "int64";
    o.mode = RunMode::Generate;
    o.new_tokens = 16;
    const auto cli = analyzeModel(model, o);
    EXPECT_EQ(report->kv_cache_bytes, cli.kv_cache_bytes);
    EXPECT_EQ(report->peak_bytes, cli.peak_bytes);
    EXPECT_NE(panel->status().indexOf(QStringLiteral("KV cache")), -1) << panel->status().toStdString();

    // the static cache (the file holds its programs): the KV cache row's second choice, as --cache static
    EXPECT_EQ(panel->cache(), GenerationCache::Dynamic);
    panel->setCache(GenerationCache::Static);
    ASSERT_EQ(panel->cache(), GenerationCache::Static);
    QSignalSpy staticFailed(&w, &MainWindow::runFailed);
    panel->runButton()->click();
    ASSERT_TRUE(waitForReport(w)) << (staticFailed.isEmpty() ? std::string() : staticFailed.front().front().toString().toStdString());
    const auto staticReport = w.report();
    ASSERT_TRUE(staticReport);
    EXPECT_EQ(staticReport->run.cache, GenerationCache::Static);
    o.cache = GenerationCache::Static;
    const auto staticCli = analyzeModel(model, o);
    EXPECT_EQ(staticReport->kv_cache_bytes, staticCli.kv_cache_bytes);
    EXPECT_EQ(staticReport->peak_bytes, staticCli.peak_bytes);
    // prompt + new tokens - 1 slots per layer: 2 x layers x batch x KV heads x 79 x head dim x 4 bytes
    const auto& g = model.info().generation;
    EXPECT_EQ(staticCli.kv_cache_bytes, std::int64_t {2} * g.layers * 2 * g.kv_heads * (64 + 16 - 1) * g.head_dim * 4);

    // The GPUs tab serves: with a budget, fit --serve's answer for the run's context (prompt + new tokens), batch
    // and precision, the layout in its table
    w.whatIfPanel()->setBudget(QStringLiteral("2 GiB"));
    ASSERT_TRUE(w.whatIfPanel()->budgetBox()->isEnabled()) << "a generation's budget box is usable (serving)";
    EXPECT_FALSE(w.whatIfPanel()->batchSlider()->isEnabled()); // the rest waits for a what-if of generation
    QElapsedTimer clock;
    clock.start();
    auto* view = w.gpuFitView();
    auto answered = [&] { // for this budget (the window may have shown another one's answer first)
        return view->headerText().contains(QStringLiteral("(2.00 GiB each)"))
            && view->headerText().contains(QStringLiteral("Sequences of"));
    };
    while (clock.elapsed() < 60000 && !answered())
        QTest::qWait(100);
    ASSERT_TRUE(view->headerText().contains(QStringLiteral("Sequences of 80 tokens at once: ")))
        << view->headerText().toStdString();
    ASSERT_GE(view->serving()->rowCount(), 5);
    EXPECT_EQ(view->serving()->item(view->serving()->rowCount() - 1, 0)->text(), QStringLiteral("KV cache"));
    QTemporaryDir dir;
    const auto json = dir.filePath(QStringLiteral("serve.json")).toStdString();
    auto r = memledger::test::runCommand(memledger::test::memledgerBinary() + " fit '" + fixture("gen_llama_gqa.pt2")
        + "' --serve --budget 2GiB --context 80 --batch 2 --dtype float32 --json '" + json + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in(json);
    const auto fit = nlohmann::json::parse(in);
    EXPECT_TRUE(view->headerText().contains(
        QStringLiteral("Sequences of 80 tokens at once: %1 ").arg(fit["sequences"].get<qint64>())))
        << view->headerText().toStdString() << "\n" << fit.dump();
    EXPECT_TRUE(view->headerText().contains(
        QStringLiteral("Longest context at 2 sequences: %1 tokens").arg(fit["longest_context"].get<qint64>())))
        << view->headerText().toStdString();
    // a row per tensor-parallel GPU count: two GPUs as fit --serve --gpus 2
    auto* byGpus = view->servingByGpus();
    ASSERT_EQ(byGpus->rowCount(), 4);
    EXPECT_EQ(byGpus->item(0, 4)->text().toLongLong(), fit["sequences"].get<qint64>());
    const auto json2 = dir.filePath(QStringLiteral("serve2.json")).toStdString();
    r = memledger::test::runCommand(memledger::test::memledgerBinary() + " fit '" + fixture("gen_llama_gqa.pt2")
        + "' --serve --budget 2GiB --context 80 --batch 2 --dtype float32 --gpus 2 --json '" + json2 + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream in2(json2);
    const auto fit2 = nlohmann::json::parse(in2);
    EXPECT_EQ(byGpus->item(1, 0)->text(), QStringLiteral("2"));
    EXPECT_EQ(byGpus->item(1, 4)->text().toLongLong(), fit2["sequences"].get<qint64>());
    EXPECT_EQ(byGpus->item(1, 5)->text().toLongLong(), fit2["longest_context"].get<qint64>());
}
