// user_metadata and compile_context in the window's parts: the Metadata table's figures are core's, and the
// Call stack dock names an allocation's values (the synthetic snapshot of tests/fixtures/snapshot_keys.py).
#include "context_table.h"
#include "stack_pane.h"

#include "snapshot/snapshot.h"
#include "snapshot/snapshot_contexts.h"

#include "qt_test_app.h"
#include "run_command.h"

#include <gtest/gtest.h>

#include <QListWidget>

#include <filesystem>
#include <unistd.h>

using namespace memledger;

namespace {

std::shared_ptr<const Report> syntheticReport()
{
    static const std::shared_ptr<const Report> r = [] {
        auto path = (std::filesystem::temp_directory_path()
            / ("memledger-snapshot-keys-gui-" + std::to_string(::getpid()) + ".pickle"))
                        .string();
        auto run = test::runCommand(std::string("/usr/bin/python3 ") + MEMLEDGER_SOURCE_DIR
            + "/tests/fixtures/snapshot_keys.py write " + path + " 2>/dev/null");
        EXPECT_EQ(run.exit_code, 0) << run.output;
        auto report = std::make_shared<const Report>(readSnapshotReport(path));
        std::filesystem::remove(path);
        return report;
    }();
    return r;
}

std::size_t allocOf(const Trace& t, std::int64_t bytes)
{
    for (std::size_t i = 0; i < t.size(); ++i)
        if (t.action[i] == Action::Alloc && t.bytes[i] == bytes)
            return i;
    return t.size();
}

} // namespace

TEST(SnapshotKeysGui, MetadataTableHoldsCoresFigures)
{
    qtTestApp();
    auto r = syntheticReport();
    ContextTable table;
    table.setReport(r);
    ASSERT_TRUE(table.hasValues());
    ASSERT_EQ(table.topLevelItemCount(), 2);
    for (int g = 0; g < 2; ++g) {
        auto* group = table.topLevelItem(g);
        const auto kind
            = group->text(ContextTable::Value) == "user_metadata" ? ContextKind::UserMetadata : ContextKind::CompileContext;
        const auto figures = contextFigures(*r, kind);
        ASSERT_EQ(group->childCount(), static_cast<int>(figures.size()));
        std::int64_t total = 0;
        for (const auto& f : figures) {
            bool found = false;
            for (int k = 0; k < group->childCount(); ++k) {
                auto* row = group->child(k);
                const auto text = f.value.empty() ? QStringLiteral("(none)") : QString::fromStdString(f.value);
                if (row->text(ContextTable::Value) != text)
                    continue;
                found = true;
                EXPECT_EQ(row->data(ContextTable::Allocations, Qt::UserRole).toLongLong(), f.allocations);
                EXPECT_EQ(row->data(ContextTable::Allocated, Qt::UserRole).toLongLong(), f.allocated_bytes);
                EXPECT_EQ(row->data(ContextTable::AtPeak, Qt::UserRole).toLongLong(), f.peak_bytes);
            }
            EXPECT_TRUE(found) << f.value;
            total += f.allocated_bytes;
        }
        EXPECT_EQ(group->data(ContextTable::Allocated, Qt::UserRole).toLongLong(), total);
    }
    // A report without values: no rows, the window hides the tab.
    table.setReport(std::make_shared<const Report>());
    EXPECT_FALSE(table.hasValues());
}

TEST(SnapshotKeysGui, CallStackDockNamesTheValues)
{
    qtTestApp();
    auto r = syntheticReport();
    const auto i = allocOf(*r->trace, 8192);
    ASSERT_LT(i, r->trace->size());
    const auto lines = contextLinesHtml(*r, i);
    EXPECT_TRUE(lines.contains(QStringLiteral("user_metadata: step 2"))) << lines.toStdString();
    EXPECT_TRUE(lines.contains(QStringLiteral("compile_context: torch-compiled frame 0/0"))) << lines.toStdString();
    // and its annotation (torch.cuda.memory._annotate_tensor)
    EXPECT_TRUE(lines.contains(QStringLiteral("annotated at 0.009 ms: packed for backward"))) << lines.toStdString();
    EXPECT_TRUE(contextLinesHtml(*r, allocOf(*r->trace, 4096)).isEmpty()); // neither
    StackPane pane;
    pane.setReport(r);
    pane.showAllocation(static_cast<std::int64_t>(i));
    EXPECT_TRUE(pane.title().contains(QStringLiteral("user_metadata: step 2"))) << pane.title().toStdString();
    ASSERT_GT(pane.frameCount(), 0);
    EXPECT_TRUE(pane.list()->item(0)->toolTip().contains(QStringLiteral("(fx: add_1 = aten.add.Tensor)")));
}
