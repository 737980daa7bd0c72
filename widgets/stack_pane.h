#pragma once
// The whole call stack of one allocation (or of a call-tree node), innermost frame first, one frame a line as
// "file:line name"; the user's own Python frames in bold, the allocator's, the interpreter's and torch's own
// frames dimmed (snapshot/frames.h says which is which).
#include "analysis/call_tree.h"
#include "report/report.h"
#include "snapshot/frames.h"

#include <QWidget>

#include <memory>

class QCheckBox;
class QLabel;
class QListWidget;

namespace memledger {

// A frame's "file:line name" with its file's folders shortened for a narrow view: the path after
// site-packages/ (dist-packages/), else the last folder and the file ("models/model.py:54 forward").
QString shortFrameText(const QString& text);

// A stack as a tooltip's rich text: at most `maxFrames` frames (the allocator's and unwinder's left out),
// then "… N more frames"; "" for the empty stack.
QString stackTooltipHtml(const Trace& trace, std::uint32_t stack, int maxFrames = 12);
QString stackTooltipHtml(const std::vector<FrameView>& frames, int maxFrames = 12);

// The user_metadata and compile_context of a snapshot report's trace event and the annotations of the allocation
// it made (torch.cuda.memory._annotate_tensor), as rich text lines ("user_metadata: step 3<br>compile_context:
// …<br>annotated at 12.500 ms: packed"); "" when it has none.
QString contextLinesHtml(const Report& report, std::size_t event);

class StackPane : public QWidget {
    Q_OBJECT
public:
    explicit StackPane(QWidget* parent = nullptr);
    void setReport(std::shared_ptr<const Report> report);

    // The allocation of trace event `event` (its alloc or free); -1 clears. Its Python frames first, innermost
    // first, then the C++ and interpreter frames (hidden with "Python frames only", pythonOnlyBox()).
    void showAllocation(std::int64_t event);
    // Frames as a call tree shows them, innermost first.
    void showFrames(const QString& title, const std::vector<CallTreeLabel>& frames);

    QString title() const;
    int frameCount() const;
    QString frameText(int row) const;
    bool frameIsUser(int row) const;
    QListWidget* list() const { return list_; }
    QCheckBox* pythonOnlyBox() const { return pythonOnly_; }

private:
    std::shared_ptr<const Report> report_;
    QLabel* title_;
    QCheckBox* pythonOnly_;
    QListWidget* list_;
    std::int64_t shown_ = -1; // the event showAllocation shows; -1: none (or a call tree node's frames)
};

} // namespace memledger
