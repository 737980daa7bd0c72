#include "byte_axis_ticker.h"

#include <cmath>

namespace memledger {

double ByteAxisTicker::unitFor(double magnitude)
{
    double unit = 1;
    while (unit < 1024.0 * 1024 * 1024 && std::abs(magnitude) >= unit * 1024)
        unit *= 1024;
    return unit;
}

QString ByteAxisTicker::unitName(double unit)
{
    if (unit >= 1024.0 * 1024 * 1024)
        return QStringLiteral("GiB");
    if (unit >= 1024.0 * 1024)
        return QStringLiteral("MiB");
    if (unit >= 1024.0)
        return QStringLiteral("KiB");
    return QStringLiteral("B");
}

void ByteAxisTicker::generate(const QCPRange& range, const QLocale& locale, QChar formatChar, int precision,
    QVector<double>& ticks, QVector<double>* subTicks, QVector<QString>* tickLabels)
{
    unit_ = unitFor(std::max(std::abs(range.lower), std::abs(range.upper)));
    QCPAxisTicker::generate(range, locale, formatChar, precision, ticks, subTicks, tickLabels);
}

double ByteAxisTicker::getTickStep(const QCPRange& range)
{
    // A 1-2-5 step in the chosen unit; bytes are whole, so never below one byte.
    double inUnit = range.size() / unit_ / std::max(1, tickCount());
    double magnitude = std::pow(10.0, std::floor(std::log10(inUnit > 0 ? inUnit : 1)));
    double mantissa = inUnit / magnitude;
    double nice = mantissa < 1.5 ? 1 : mantissa < 3.5 ? 2 : mantissa < 7.5 ? 5 : 10;
    step_ = std::max(1.0, nice * magnitude * unit_);
    return step_;
}

QString ByteAxisTicker::getTickLabel(double tick, const QLocale& locale, QChar, int)
{
    double v = tick / unit_;
    if (std::abs(v) < 1e-9)
        return QStringLiteral("0");
    double stepInUnit = step_ / unit_;
    int decimals = stepInUnit >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(stepInUnit) - 1e-9));
    return locale.toString(v, 'f', std::min(decimals, 3)) + QLatin1Char(' ') + unitName(unit_);
}

void setUpCurvesPlot(QCustomPlot* plot, int minimumHeight)
{
    plot->setMinimumHeight(minimumHeight);
    plot->setInteractions(QCP::iRangeDrag | QCP::iRangeZoom);
    plot->axisRect()->setRangeDrag(Qt::Horizontal);
    plot->axisRect()->setRangeZoom(Qt::Horizontal);
    plot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new ByteAxisTicker));
    plot->yAxis->setLabel(QObject::tr("live bytes"));
    plot->legend->setVisible(true);
    plot->legend->setFillOrder(QCPLegend::foColumnsFirst);
    plot->plotLayout()->insertRow(0);
    plot->plotLayout()->addElement(0, 0, plot->legend);
    plot->plotLayout()->setRowStretchFactor(0, 0.001);
    plot->legend->setMargins(QMargins(4, 2, 4, 2));
}

} // namespace memledger
