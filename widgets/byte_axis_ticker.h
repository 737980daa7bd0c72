#pragma once
#include <qcustomplot.h>

namespace memledger {

// Ticks at round numbers of B, KiB, MiB or GiB (1024-based), labelled "512 KiB", "1.5 GiB".
class ByteAxisTicker : public QCPAxisTicker {
public:
    // The unit the range is best read in: 1, 1024, 1024^2 or 1024^3.
    static double unitFor(double magnitude);
    static QString unitName(double unit);

protected:
    void generate(const QCPRange& range, const QLocale& locale, QChar formatChar, int precision, QVector<double>& ticks,
        QVector<double>* subTicks, QVector<QString>* tickLabels) override;
    double getTickStep(const QCPRange& range) override;
    QString getTickLabel(double tick, const QLocale& locale, QChar formatChar, int precision) override;

private:
    double unit_ = 1;
    double step_ = 1;
};

// A chart of live bytes over time with one curve per recording (the comparison, the ranks): drag and zoom along
// the time axis only, byte ticks, and the legend in a row of its own above the curves, entries side by side.
void setUpCurvesPlot(QCustomPlot* plot, int minimumHeight);

} // namespace memledger
