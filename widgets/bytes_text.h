#pragma once
// Bytes as the widgets write them: formatBytes of core (support/format.h) as a QString, "1.52 MiB".
#include "support/format.h"

#include <QString>

#include <cstdint>

namespace memledger {

inline QString bytesText(std::int64_t bytes)
{
    return QString::fromStdString(formatBytes(bytes));
}

inline QString bytesText(double bytes)
{
    return bytesText(static_cast<std::int64_t>(bytes));
}

} // namespace memledger
