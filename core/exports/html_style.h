#pragma once
// The look every memledger HTML page shares (the report, the comparison): the page, headings, tables and their
// cells. Each page adds its own rules after it.
namespace memledger {

inline constexpr const char* kHtmlBaseStyle = R"(
body{font:14px system-ui,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:16px;margin:24px 0 8px}
.muted{color:#666} table{border-collapse:collapse;font-size:13px}
td,th{padding:2px 8px;text-align:right;border-bottom:1px solid #eee;white-space:nowrap}
td:first-child,th:first-child,td.l,th.l{text-align:left}
)";

} // namespace memledger
