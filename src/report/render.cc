// RenderReportHtml: one HTML file holding the chart library, the page script, its style sheet
// and the data model. The page draws everything in the browser (web/report.js), so the same
// page serves `trainscope serve`, which swaps the data for fresh data.json every 2 s.
#include <string>

#include "report/assets.h"
#include "trainscope/report/report.h"

namespace trainscope::report {
namespace {

std::string RenderEscapeHtml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// JSON that is safe inside a <script> element: '<' only occurs inside JSON strings, where
// "\u003c" means the same, so no "</script>" or "<!--" can end the element early.
std::string RenderScriptJson(const nlohmann::json& data) {
  std::string text = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size() + 64);
  for (char c : text) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string RenderReportHtml(const nlohmann::json& data, const ReportOptions& options) {
  std::string title = options.title;
  if (title.empty() && data.is_object())
    title = data.value("title", std::string("trainscope report"));
  std::string html;
  html += "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // No network: the page may load nothing but itself, inline scripts, styles and data: images.
  html +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
      "connect-src 'self'\">\n";
  html += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  html += "<title>" + RenderEscapeHtml(title) + "</title>\n<style>\n";
  html += AssetDygraphCss();
  html += "\n";
  html += AssetReportCss();
  html += "\n</style>\n</head>\n<body>\n<div id=\"app\"></div>\n";
  html += "<script id=\"ts-data\" type=\"application/json\">";
  html += RenderScriptJson(data);
  html += "</script>\n<script>window.TS_LIVE = ";
  html += options.live ? "true" : "false";
  html += ";</script>\n<script>\n";
  html += AssetDygraphJs();
  html += "\n</script>\n<script>\n";
  html += AssetReportJs();
  html += "\n</script>\n</body>\n</html>\n";
  return html;
}

}  // namespace trainscope::report
