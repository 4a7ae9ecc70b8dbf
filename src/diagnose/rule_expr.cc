// The rule condition language and templates (rule_expr.h). A recursive-descent parser over a
// small tokenizer builds a typed tree; types are checked while parsing, so a rule file with a
// comparison of a string fact with a number is refused at load, not silently false later.
#include "diagnose/rule_expr.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "trainscope/core/table.h"

namespace trainscope::diagnose::internal {

struct ExprNode {
  enum Op { kLiteral, kFact, kHas, kFinding, kNot, kAnd, kOr, kCmp } op = kLiteral;
  Value::Kind type = Value::kBool;  // the node's result type
  Value literal;
  std::string name;  // fact name, glob, or comparison operator
  std::shared_ptr<const ExprNode> a, b;
};

namespace {

using ExprNodePtr = std::shared_ptr<ExprNode>;

struct ExprToken {
  enum Kind { kEnd, kNumber, kString, kIdent, kPunct } kind = kEnd;
  std::string text;
  double number = 0;
  size_t pos = 0;  // 0-based offset
};

class ExprParser {
 public:
  explicit ExprParser(std::string_view text) : text_(text) {}

  absl::StatusOr<Expr> Parse() {
    Expr e;
    expr_ = &e;
    if (!Next()) return error_;
    ExprNodePtr root = ParseOr();
    if (!root) return error_;
    if (tok_.kind != ExprToken::kEnd) return Fail(tok_.pos, "unexpected \"" + tok_.text + "\"");
    if (root->type != Value::kBool) return Fail(0, "the condition is not a boolean");
    e.root = root;
    return e;
  }

 private:
  absl::Status Fail(size_t pos, const std::string& what) {
    Err(pos, what);
    return error_;
  }
  // Records the first error; returns the null node the callers pass up.
  std::nullptr_t Err(size_t pos, const std::string& what) {
    if (error_.ok())
      error_ = absl::InvalidArgumentError(absl::StrCat("position ", pos + 1, ": ", what));
    return nullptr;
  }

  bool Next() {
    while (i_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[i_]))) ++i_;
    tok_ = ExprToken();
    tok_.pos = i_;
    if (i_ >= text_.size()) return true;
    char c = text_[i_];
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && i_ + 1 < text_.size() &&
         std::isdigit(static_cast<unsigned char>(text_[i_ + 1])))) {
      std::string s(text_.substr(i_));
      char* end = nullptr;
      tok_.number = std::strtod(s.c_str(), &end);
      size_t n = static_cast<size_t>(end - s.c_str());
      if (n < s.size() && (std::isalpha(static_cast<unsigned char>(s[n])) || s[n] == '_')) {
        Err(i_, "bad number");
        return false;
      }
      tok_.kind = ExprToken::kNumber;
      tok_.text = s.substr(0, n);
      i_ += n;
      return true;
    }
    if (c == '"') {
      size_t j = i_ + 1;
      while (j < text_.size() && text_[j] != '"') ++j;
      if (j >= text_.size()) {
        Err(i_, "unterminated string");
        return false;
      }
      tok_.kind = ExprToken::kString;
      tok_.text = std::string(text_.substr(i_ + 1, j - i_ - 1));
      i_ = j + 1;
      return true;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i_;
      while (j < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[j])) ||
                                  text_[j] == '_' || text_[j] == '.'))
        ++j;
      tok_.kind = ExprToken::kIdent;
      tok_.text = std::string(text_.substr(i_, j - i_));
      i_ = j;
      return true;
    }
    static const char* kPuncts[] = {"==", "!=", "<=", ">=", "&&", "||",
                                    "<",  ">",  "!",  "(",  ")",  ","};
    for (const char* p : kPuncts) {
      if (text_.substr(i_, std::strlen(p)) == p) {
        tok_.kind = ExprToken::kPunct;
        tok_.text = p;
        i_ += std::strlen(p);
        return true;
      }
    }
    Err(i_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    return false;
  }

  bool IsWord(const char* w) const { return tok_.kind == ExprToken::kIdent && tok_.text == w; }
  bool IsPunct(const char* p) const { return tok_.kind == ExprToken::kPunct && tok_.text == p; }

  ExprNodePtr Binary(ExprNode::Op op, ExprNodePtr a, ExprNodePtr b, const char* name) {
    auto n = std::make_shared<ExprNode>();
    n->op = op;
    n->name = name;
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }

  ExprNodePtr ParseOr() {
    ExprNodePtr a = ParseAnd();
    while (a && (IsWord("or") || IsPunct("||"))) {
      size_t pos = tok_.pos;
      if (!Next()) return nullptr;
      ExprNodePtr b = ParseAnd();
      if (!b) return nullptr;
      if (a->type != Value::kBool || b->type != Value::kBool)
        return Err(pos, "\"or\" needs booleans on both sides");
      a = Binary(ExprNode::kOr, a, b, "or");
    }
    return a;
  }

  ExprNodePtr ParseAnd() {
    ExprNodePtr a = ParseUnary();
    while (a && (IsWord("and") || IsPunct("&&"))) {
      size_t pos = tok_.pos;
      if (!Next()) return nullptr;
      ExprNodePtr b = ParseUnary();
      if (!b) return nullptr;
      if (a->type != Value::kBool || b->type != Value::kBool)
        return Err(pos, "\"and\" needs booleans on both sides");
      a = Binary(ExprNode::kAnd, a, b, "and");
    }
    return a;
  }

  ExprNodePtr ParseUnary() {
    if (IsWord("not") || IsPunct("!")) {
      size_t pos = tok_.pos;
      if (!Next()) return nullptr;
      ExprNodePtr a = ParseUnary();
      if (!a) return nullptr;
      if (a->type != Value::kBool) return Err(pos, "\"not\" needs a boolean");
      return Binary(ExprNode::kNot, a, nullptr, "not");
    }
    return ParseCompare();
  }

  ExprNodePtr ParseCompare() {
    ExprNodePtr a = ParsePrimary();
    if (!a) return nullptr;
    for (const char* op : {"==", "!=", "<=", ">=", "<", ">"}) {
      if (!IsPunct(op)) continue;
      size_t pos = tok_.pos;
      if (!Next()) return nullptr;
      ExprNodePtr b = ParsePrimary();
      if (!b) return nullptr;
      bool ordering = op[0] == '<' || op[0] == '>';
      if (ordering && (a->type != Value::kNumber || b->type != Value::kNumber))
        return Err(pos, absl::StrCat("\"", op, "\" compares numbers"));
      if (a->type != b->type)
        return Err(pos, absl::StrCat("\"", op, "\" compares a ", FactTypeName(a->type), " with a ",
                                     FactTypeName(b->type)));
      return Binary(ExprNode::kCmp, a, b, op);
    }
    return a;
  }

  // `name(` already seen as an identifier followed by "(": one argument.
  ExprNodePtr ParseCall(const std::string& fn, size_t pos) {
    if (!Next()) return nullptr;  // past "("
    auto n = std::make_shared<ExprNode>();
    n->type = Value::kBool;
    if (fn == "has") {
      if (tok_.kind != ExprToken::kIdent) return Err(tok_.pos, "has() takes a fact name");
      if (!FactNode(tok_.text, tok_.pos)) return nullptr;
      n->op = ExprNode::kHas;
      n->name = tok_.text;
    } else if (fn == "finding") {
      if (tok_.kind != ExprToken::kString)
        return Err(tok_.pos, "finding() takes a quoted id pattern");
      n->op = ExprNode::kFinding;
      n->name = tok_.text;
      expr_->globs.push_back(tok_.text);
    } else {
      return Err(pos, "unknown function \"" + fn + "\" (has, finding)");
    }
    if (!Next()) return nullptr;
    if (!IsPunct(")")) return Err(tok_.pos, "expected \")\"");
    if (!Next()) return nullptr;
    return n;
  }

  ExprNodePtr FactNode(const std::string& name, size_t pos) {
    const FactInfo* info = FindFact(name);
    if (!info) return Err(pos, "unknown fact \"" + name + "\"");
    expr_->facts.insert(name);
    auto n = std::make_shared<ExprNode>();
    n->op = ExprNode::kFact;
    n->type = info->type;
    n->name = name;
    return n;
  }

  ExprNodePtr ParsePrimary() {
    ExprToken t = tok_;
    if (t.kind == ExprToken::kEnd) return Err(t.pos, "unexpected end of the condition");
    if (IsPunct("(")) {
      if (!Next()) return nullptr;
      ExprNodePtr a = ParseOr();
      if (!a) return nullptr;
      if (!IsPunct(")")) return Err(tok_.pos, "expected \")\"");
      if (!Next()) return nullptr;
      return a;
    }
    auto lit = std::make_shared<ExprNode>();
    if (t.kind == ExprToken::kNumber) {
      lit->type = Value::kNumber;
      lit->literal = Value::Number(t.number);
    } else if (t.kind == ExprToken::kString) {
      lit->type = Value::kString;
      lit->literal = Value::String(t.text);
    } else if (t.kind == ExprToken::kIdent && (t.text == "true" || t.text == "false")) {
      lit->type = Value::kBool;
      lit->literal = Value::Bool(t.text == "true");
    } else if (t.kind == ExprToken::kIdent) {
      if (!Next()) return nullptr;
      if (IsPunct("(")) return ParseCall(t.text, t.pos);
      if (t.text == "and" || t.text == "or" || t.text == "not")
        return Err(t.pos, "unexpected \"" + t.text + "\"");
      return FactNode(t.text, t.pos);
    } else {
      return Err(t.pos, "unexpected \"" + t.text + "\"");
    }
    if (!Next()) return nullptr;
    return lit;
  }

  std::string_view text_;
  size_t i_ = 0;
  ExprToken tok_;
  Expr* expr_ = nullptr;
  absl::Status error_;
};

// A node's value, or kUnknown.
Value ExprEvalValue(const ExprNode& n, const EvalContext& ctx);

Tri ExprEvalBool(const ExprNode& n, const EvalContext& ctx) {
  Value v = ExprEvalValue(n, ctx);
  if (v.kind != Value::kBool) return Tri::kUnknown;
  return v.flag ? Tri::kTrue : Tri::kFalse;
}

Value ExprFromTri(Tri t) { return t == Tri::kUnknown ? Value() : Value::Bool(t == Tri::kTrue); }

Value ExprCompare(const std::string& op, const Value& x, const Value& y) {
  if (x.kind == Value::kUnknown || y.kind == Value::kUnknown || x.kind != y.kind) return Value();
  int c = 0;
  if (x.kind == Value::kNumber) {
    if (std::isnan(x.number) || std::isnan(y.number)) return Value::Bool(op == "!=");
    c = x.number < y.number ? -1 : x.number > y.number ? 1 : 0;
  } else if (x.kind == Value::kString) {
    c = x.text.compare(y.text);
    c = c < 0 ? -1 : c > 0 ? 1 : 0;
  } else {
    c = x.flag == y.flag ? 0 : 1;
  }
  if (op == "==") return Value::Bool(c == 0);
  if (op == "!=") return Value::Bool(c != 0);
  if (op == "<") return Value::Bool(c < 0);
  if (op == "<=") return Value::Bool(c <= 0);
  if (op == ">") return Value::Bool(c > 0);
  return Value::Bool(c >= 0);
}

Value ExprEvalValue(const ExprNode& n, const EvalContext& ctx) {
  switch (n.op) {
    case ExprNode::kLiteral:
      return n.literal;
    case ExprNode::kFact: {
      auto it = ctx.facts ? ctx.facts->find(n.name) : Facts::const_iterator();
      if (!ctx.facts || it == ctx.facts->end() || it->second.kind != n.type) return Value();
      return it->second;
    }
    case ExprNode::kHas: {
      auto it = ctx.facts ? ctx.facts->find(n.name) : Facts::const_iterator();
      return Value::Bool(ctx.facts && it != ctx.facts->end() && it->second.kind != Value::kUnknown);
    }
    case ExprNode::kFinding:
      return Value::Bool(!ctx.finding_id.empty() && GlobMatch(n.name, ctx.finding_id));
    case ExprNode::kNot: {
      Tri a = ExprEvalBool(*n.a, ctx);
      return ExprFromTri(a == Tri::kUnknown ? a : a == Tri::kTrue ? Tri::kFalse : Tri::kTrue);
    }
    case ExprNode::kAnd: {
      Tri a = ExprEvalBool(*n.a, ctx), b = ExprEvalBool(*n.b, ctx);
      if (a == Tri::kFalse || b == Tri::kFalse) return Value::Bool(false);
      return ExprFromTri(a == Tri::kTrue && b == Tri::kTrue ? Tri::kTrue : Tri::kUnknown);
    }
    case ExprNode::kOr: {
      Tri a = ExprEvalBool(*n.a, ctx), b = ExprEvalBool(*n.b, ctx);
      if (a == Tri::kTrue || b == Tri::kTrue) return Value::Bool(true);
      return ExprFromTri(a == Tri::kFalse && b == Tri::kFalse ? Tri::kFalse : Tri::kUnknown);
    }
    case ExprNode::kCmp:
      return ExprCompare(n.name, ExprEvalValue(*n.a, ctx), ExprEvalValue(*n.b, ctx));
  }
  return Value();
}

}  // namespace

absl::StatusOr<Expr> ParseExpr(std::string_view text) { return ExprParser(text).Parse(); }

Tri Evaluate(const Expr& expr, const EvalContext& ctx) {
  if (!expr.root) return Tri::kUnknown;
  return ExprEvalBool(*expr.root, ctx);
}

// Iterative glob with backtracking to the last '*'.
bool GlobMatch(std::string_view glob, std::string_view text) {
  size_t g = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (g < glob.size() && glob[g] == '*') {
      star = g++;
      mark = t;
    } else if (g < glob.size() && glob[g] == text[t]) {
      ++g;
      ++t;
    } else if (star != std::string_view::npos) {
      g = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (g < glob.size() && glob[g] == '*') ++g;
  return g == glob.size();
}

absl::StatusOr<Template> ParseTemplate(std::string_view text) {
  Template t;
  size_t i = 0;
  while (i < text.size()) {
    size_t open = text.find('{', i);
    if (open == std::string_view::npos) {
      t.parts.push_back({std::string(text.substr(i)), "", ""});
      break;
    }
    if (open > i) t.parts.push_back({std::string(text.substr(i, open - i)), "", ""});
    size_t close = text.find('}', open);
    if (close == std::string_view::npos)
      return absl::InvalidArgumentError(absl::StrCat("position ", open + 1, ": unclosed \"{\""));
    std::string_view inner = text.substr(open + 1, close - open - 1);
    std::string name(inner), format;
    if (size_t colon = inner.find(':'); colon != std::string_view::npos) {
      name = std::string(inner.substr(0, colon));
      format = std::string(inner.substr(colon + 1));
    }
    const FactInfo* info = FindFact(name);
    if (!info) {
      return absl::InvalidArgumentError(
          absl::StrCat("position ", open + 1, ": unknown fact \"", name, "\""));
    }
    if (!format.empty() && format != "%" && format != "g" && format != "bytes" && format != "int")
      return absl::InvalidArgumentError(absl::StrCat("position ", open + 1, ": unknown format \"",
                                                     format, "\" (%, g, bytes, int)"));
    if (!format.empty() && info->type != Value::kNumber)
      return absl::InvalidArgumentError(absl::StrCat("position ", open + 1, ": format \"", format,
                                                     "\" of a ", FactTypeName(info->type),
                                                     " fact"));
    t.parts.push_back({"", name, format});
    t.facts.insert(name);
    i = close + 1;
  }
  return t;
}

std::string FormatValue(const Value& v, std::string_view format) {
  switch (v.kind) {
    case Value::kUnknown:
      return "?";
    case Value::kString:
      return v.text;
    case Value::kBool:
      return v.flag ? "true" : "false";
    case Value::kNumber:
      break;
  }
  if (!std::isfinite(v.number)) return absl::StrCat(v.number);
  if (format == "%") return FormatDouble(100 * v.number, 1) + "%";
  if (format == "bytes") return FormatBytes(v.number);
  if (format == "int") return absl::StrFormat("%.0f", v.number);
  return absl::StrFormat("%.4g", v.number);
}

std::string Render(const Template& t, const Facts& facts) {
  std::string out;
  for (const Template::Part& p : t.parts) {
    if (p.name.empty()) {
      out += p.literal;
      continue;
    }
    auto it = facts.find(p.name);
    out += FormatValue(it == facts.end() ? Value() : it->second, p.format);
  }
  return out;
}

std::string RenderForDoc(const Template& t) {
  std::string out;
  for (const Template::Part& p : t.parts)
    out += p.name.empty() ? p.literal : absl::StrCat("`<", p.name, ">`");
  return out;
}

}  // namespace trainscope::diagnose::internal
