#include "exports/remedies_export.h"

#include "support/format.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace memledger {

nlohmann::json remediesToJson(const std::vector<Remedy>& remedies)
{
    auto j = nlohmann::json::array();
    for (const auto& m : remedies) {
        nlohmann::json e {{"kind", nameOf(m.kind)}, {"title", m.title}, {"change", m.change}, {"details", m.details},
            {"peak_total_before_bytes", m.peak_total_before}, {"peak_total_after_bytes", m.peak_total_after},
            {"peak_total_saving_bytes", m.peakSaving()}, {"reserve_before_bytes", m.reserve_before},
            {"reserve_after_bytes", m.reserve_after}, {"reserve_saving_bytes", m.reserveSaving()},
            {"method", nameOf(m.method)}, {"measure", nameOf(m.measure_how)}};
        if (m.batch)
            e["batch"] = m.batch;
        if (!m.dtype.empty())
            e["dtype"] = m.dtype;
        if (!m.tile.empty())
            e["tile"] = m.tile;
        if (!m.setting.empty())
            e["setting"] = m.setting;
        if (m.extra_bytes)
            e["extra_bytes"] = m.extra_bytes;
        if (m.measured_peak_total)
            e["measured_peak_total_bytes"] = *m.measured_peak_total;
        if (m.measured_reserve)
            e["measured_reserve_bytes"] = *m.measured_reserve;
        if (!m.measure_note.empty())
            e["measure_note"] = m.measure_note;
        if (!m.not_worked_out.empty())
            e["not_worked_out"] = m.not_worked_out;
        j.push_back(std::move(e));
    }
    return j;
}

std::vector<Remedy> remediesFromJson(const nlohmann::json& j)
{
    std::vector<Remedy> out;
    for (const auto& e : j) {
        Remedy m;
        const auto kind = fromName<RemedyKind>(e.at("kind").get<std::string>());
        if (!kind)
            continue; // a remedy of a later memledger: not one this one knows
        m.kind = *kind;
        m.title = e.at("title").get<std::string>();
        m.change = e.value("change", "");
        m.details = e.value("details", std::vector<std::string> {});
        m.peak_total_before = e.at("peak_total_before_bytes").get<std::int64_t>();
        m.peak_total_after = e.at("peak_total_after_bytes").get<std::int64_t>();
        m.reserve_before = e.value("reserve_before_bytes", std::int64_t {0});
        m.reserve_after = e.value("reserve_after_bytes", std::int64_t {0});
        m.method = fromName(e.value("method", "predicted"), FigureMethod::Predicted);
        m.measure_how = fromName(e.value("measure", ""), MeasureHow::None);
        m.batch = e.value("batch", std::int64_t {0});
        m.dtype = e.value("dtype", "");
        m.tile = e.value("tile", std::vector<std::int64_t> {});
        m.setting = e.value("setting", "");
        m.extra_bytes = e.value("extra_bytes", std::int64_t {0});
        if (e.contains("measured_peak_total_bytes"))
            m.measured_peak_total = e["measured_peak_total_bytes"].get<std::int64_t>();
        if (e.contains("measured_reserve_bytes"))
            m.measured_reserve = e["measured_reserve_bytes"].get<std::int64_t>();
        m.measure_note = e.value("measure_note", "");
        m.not_worked_out = e.value("not_worked_out", "");
        out.push_back(std::move(m));
    }
    return out;
}

std::string remediesToText(const std::vector<Remedy>& remedies, const std::string& device)
{
    const bool meta = device == "meta";
    auto method = [&](FigureMethod m) { return std::string(figureMethodText(m, meta)); };
    std::ostringstream s;
    if (remedies.empty()) {
        s << "  (nothing found that would help without changing the result)\n";
        return s.str();
    }
    int n = 0;
    for (const auto& m : remedies) {
        if (!m.not_worked_out.empty()) { // asked for, and said why not: never left out
            s << "  " << ++n << ". " << m.title << "  [not worked out]\n     " << m.not_worked_out << "\n";
            continue;
        }
        s << "  " << ++n << ". " << m.title << "  [" << method(m.method) << "]\n";
        s << "     peak total " << formatBytes(m.peak_total_before) << " -> " << formatBytes(m.peak_total_after) << " ("
          << formatByteChange(m.peakSaving(), 0) << ")";
        if (m.reserve_before > 0 || m.reserve_after > 0)
            s << ", reserve " << formatBytes(m.reserve_before) << " -> " << formatBytes(m.reserve_after) << " ("
              << formatByteChange(m.reserveSaving(), 0) << ")";
        s << "\n";
        if (m.measured_peak_total && m.method == FigureMethod::Measured && m.kind != RemedyKind::Tiling)
            s << "     " << method(FigureMethod::Measured) << ": peak total " << formatBytes(*m.measured_peak_total)
              << (m.measured_reserve ? ", reserve " + formatBytes(*m.measured_reserve) : std::string()) << "\n";
        s << "     " << m.change << "\n";
        const std::size_t shown = 12;
        for (std::size_t i = 0; i < m.details.size() && i < shown; ++i)
            s << "       - " << m.details[i] << "\n";
        if (m.details.size() > shown)
            s << "       - ... and " << (m.details.size() - shown) << " more\n";
        if (m.measure_how == MeasureHow::Variant)
            s << "     measurable: run the edited model (window: Measure)\n";
    }
    return s.str();
}

} // namespace memledger
