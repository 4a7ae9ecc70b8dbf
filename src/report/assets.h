// Private to the report module: the files embedded into every report page at build time
// (embed_assets.cmake): uPlot's script and style sheet (web/node_modules, pinned by
// web/package-lock.json) and the page's own script and style sheet (src/report/web).
#ifndef TRAINSCOPE_REPORT_ASSETS_H_
#define TRAINSCOPE_REPORT_ASSETS_H_

#include <string_view>

namespace trainscope::report {

std::string_view AssetUplotJs();
std::string_view AssetUplotCss();
std::string_view AssetReportJs();
std::string_view AssetReportCss();

}  // namespace trainscope::report

#endif  // TRAINSCOPE_REPORT_ASSETS_H_
