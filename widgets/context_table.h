#pragma once
// A snapshot's allocations per user_metadata value and per compile_context (snapshot/snapshot_contexts.h): one
// group for each, a row per value with the allocations, the bytes they allocated and the bytes alive at the peak.
#include "report/report.h"

#include <QTreeWidget>

#include <memory>

namespace memledger {

class ContextTable : public QTreeWidget {
    Q_OBJECT
public:
    enum Column { Value, Allocations, Allocated, AtPeak, ColumnCount };
    explicit ContextTable(QWidget* parent = nullptr);
    void setReport(const std::shared_ptr<const Report>& report);
    // True when the report's allocations carry a user_metadata or a compile_context.
    bool hasValues() const { return topLevelItemCount() > 0; }
};

} // namespace memledger
