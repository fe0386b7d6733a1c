#include "model/hf_config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_bounded.h"
#include "core/mmap_file.h"

namespace loom {

namespace {

using nlohmann::json;

std::string type_text(const json& j) { return j.type_name(); }

// An integer JSON value within int, reported with its true value when not (2^63 and above are
// unsigned in nlohmann and would print wrapped to a negative number through int64_t).
int checked_int(const json& v, const std::string& key, const std::string& what) {
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int>::max()))
    fail(what, ": key '", key, "' = ", v.get<uint64_t>(), " is out of range (at most ",
         std::numeric_limits<int>::max(), ")");
  const int64_t x = v.get<int64_t>();
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    fail(what, ": key '", key, "' = ", x, " is out of range [", std::numeric_limits<int>::min(), ", ",
         std::numeric_limits<int>::max(), "]");
  return int(x);
}

int get_int(const json& j, const std::string& key, const std::string& what, const int* fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback) return *fallback;
    fail(what, ": missing key '", key, "'");
  }
  if (!it->is_number_integer())
    fail(what, ": key '", key, "': expected an integer, found ", type_text(*it), " ", json_excerpt(*it));
  return checked_int(*it, key, what);
}

double get_num(const json& j, const std::string& key, const std::string& what, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) fail(what, ": key '", key, "': expected a number, found ", type_text(*it), " ", json_excerpt(*it));
  // Every number read here is stored as a float: converting one beyond float's range is UB.
  const double d = it->get<double>();
  if (!(std::fabs(d) <= double(std::numeric_limits<float>::max())))
    fail(what, ": key '", key, "' = ", json_excerpt(*it), " is outside the float range");
  return d;
}

bool get_bool(const json& j, const std::string& key, const std::string& what, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(what, ": key '", key, "': expected true or false, found ", json_excerpt(*it));
  return it->get<bool>();
}

std::string get_str(const json& j, const std::string& key, const std::string& what, const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) fail(what, ": key '", key, "': expected a string, found ", json_excerpt(*it));
  return it->get<std::string>();
}

struct ArchInfo {
  const char* hf;
  const char* arch;
  const char* model_type;
};
constexpr ArchInfo kArchs[] = {{"LlamaForCausalLM", "llama", "llama"},
                               {"MistralForCausalLM", "mistral", "mistral"},
                               {"Qwen2ForCausalLM", "qwen2", "qwen2"}};

// The shortest decimal that reads back as the same float (1e-05, not 9.999999747378752e-06).
double short_double(float f) {
  char buf[32];
  for (int prec = 6; prec <= 9; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, double(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

}  // namespace

HfConfig parse_hf_config(const std::string& text, const std::string& what) {
  // Bounded (core/json_bounded.h): a key nested thousands deep is one error line, not a crash
  // in whatever recursion touches it later.
  const json j = parse_json_bounded(text, what, kHfConfigJsonLimits);
  if (!j.is_object()) fail(what, ": expected a JSON object, found ", type_text(j));
  HfConfig out;
  // The model class from "architectures"; configs written by hand (or by other tools) often
  // carry only "model_type", which names the same family.
  auto arch_it = j.find("architectures");
  auto type_it = j.find("model_type");
  if (arch_it != j.end() && arch_it->is_array() && !arch_it->empty() && (*arch_it)[0].is_string()) {
    out.architecture = (*arch_it)[0].get<std::string>();
  } else if (arch_it == j.end() && type_it != j.end() && type_it->is_string()) {
    for (auto& a : kArchs)
      if (*type_it == a.model_type) out.architecture = a.hf;
    if (out.architecture.empty())
      fail(what, ": model_type '", text_excerpt(type_it->get<std::string>()),
           "' is not supported (loom reads llama, mistral, qwen2) and there is no 'architectures' key");
  } else {
    fail(what, ": key 'architectures': expected a list with the model class name, found ",
         arch_it == j.end() ? std::string("nothing") : json_excerpt(*arch_it));
  }
  ModelConfig& c = out.config;
  bool known = false;
  for (auto& a : kArchs)
    if (out.architecture == a.hf) {
      c.arch = a.arch;
      known = true;
    }
  if (!known)
    fail(what, ": architecture '", text_excerpt(out.architecture),
         "' is not supported (loom reads LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)");

  c.d_model = get_int(j, "hidden_size", what, nullptr);
  c.ffn_dim = get_int(j, "intermediate_size", what, nullptr);
  c.n_layers = get_int(j, "num_hidden_layers", what, nullptr);
  c.n_heads = get_int(j, "num_attention_heads", what, nullptr);
  c.n_kv_heads = get_int(j, "num_key_value_heads", what, &c.n_heads);
  if (c.n_heads <= 0) fail(what, ": key 'num_attention_heads' = ", c.n_heads, " (must be positive)");
  if (!j.contains("head_dim") || j["head_dim"].is_null()) {
    if (c.d_model % c.n_heads != 0)
      fail(what, ": num_attention_heads = ", c.n_heads, " does not divide hidden_size = ", c.d_model,
           " (and there is no head_dim)");
  }
  const int default_head = c.d_model / c.n_heads;
  c.head_dim = get_int(j, "head_dim", what, &default_head);
  c.vocab_size = get_int(j, "vocab_size", what, nullptr);
  c.max_seq_len = get_int(j, "max_position_embeddings", what, nullptr);
  c.rms_eps = float(get_num(j, "rms_norm_eps", what, 1e-6));
  c.rope_theta = float(get_num(j, "rope_theta", what, 10000.0));
  c.rope_style = RopeStyle::HalfSplit;
  c.tied_embeddings = get_bool(j, "tie_word_embeddings", what, false);
  c.qkv_bias = c.arch == "qwen2" || get_bool(j, "attention_bias", what, false);
  if (get_bool(j, "mlp_bias", what, false)) fail(what, ": key 'mlp_bias' = true is not supported");
  const std::string act = get_str(j, "hidden_act", what, "silu");
  if (act != "silu")
    fail(what, ": key 'hidden_act' = '", text_excerpt(act), "' is not supported (expected silu)");

  if (auto rs = j.find("rope_scaling"); rs != j.end() && !rs->is_null()) {
    if (!rs->is_object()) fail(what, ": key 'rope_scaling': expected an object, found ", json_excerpt(*rs));
    const std::string type =
        get_str(*rs, "rope_type", what + " rope_scaling", get_str(*rs, "type", what + " rope_scaling", "default"));
    if (type == "llama3") {
      c.rope_scaling.llama3 = true;
      const std::string w = what + " rope_scaling";
      c.rope_scaling.factor = float(get_num(*rs, "factor", w, 1.0));
      c.rope_scaling.low_freq_factor = float(get_num(*rs, "low_freq_factor", w, 1.0));
      c.rope_scaling.high_freq_factor = float(get_num(*rs, "high_freq_factor", w, 4.0));
      const int orig = 8192;
      c.rope_scaling.original_max_position = get_int(*rs, "original_max_position_embeddings", w, &orig);
      if (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor))
        fail(w, ": high_freq_factor = ", c.rope_scaling.high_freq_factor, " must exceed low_freq_factor = ",
             c.rope_scaling.low_freq_factor);
    } else if (type != "default") {
      fail(what, ": rope_scaling type '", text_excerpt(type), "' is not supported (loom reads llama3)");
    }
  }

  const int bos_default = 1;
  c.bos_id = get_int(j, "bos_token_id", what, &bos_default);
  auto eos = j.find("eos_token_id");
  if (eos == j.end() || eos->is_null()) {
    c.eos_ids = {2};
  } else if (eos->is_number_integer()) {
    c.eos_ids = {checked_int(*eos, "eos_token_id", what)};
  } else if (eos->is_array() && !eos->empty()) {
    for (auto& e : *eos) {
      if (!e.is_number_integer()) fail(what, ": key 'eos_token_id': expected integers, found ", json_excerpt(*eos));
      c.eos_ids.push_back(checked_int(e, "eos_token_id", what));
    }
  } else {
    fail(what, ": key 'eos_token_id': expected an integer or a list of integers, found ", json_excerpt(*eos));
  }
  c.eos_id = c.eos_ids[0];
  for (int e : c.eos_ids)
    if (e < 0 || e >= c.vocab_size)
      fail(what, ": key 'eos_token_id' = ", e, " is outside vocab_size = ", c.vocab_size);

  if (auto dt = j.find("torch_dtype"); dt != j.end() && dt->is_string()) out.torch_dtype = dt->get<std::string>();
  else if (auto dt2 = j.find("dtype"); dt2 != j.end() && dt2->is_string()) out.torch_dtype = dt2->get<std::string>();

  try {
    c.validate();
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
  return out;
}

HfConfig load_hf_config(const std::string& path) {
  return parse_hf_config(read_text_file(path, kHfConfigJsonLimits.max_bytes, "config.json"), path);
}

std::string hf_config_json(const ModelConfig& c, DType dtype) {
  json j;
  const ArchInfo* a = nullptr;
  for (auto& x : kArchs)
    if (c.arch == x.arch) a = &x;
  if (!a) fail("model config: arch '", c.arch, "' has no HF architecture (expected llama, mistral, qwen2)");
  const char* torch_dtype = dtype == DType::F32 ? "float32" : dtype == DType::F16 ? "float16" : "bfloat16";
  if (dtype_is_quantized(dtype)) fail("HF config.json: torch_dtype cannot be ", dtype_name(dtype));
  j["architectures"] = json::array({a->hf});
  j["model_type"] = a->model_type;
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.ffn_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = short_double(c.rms_eps);
  j["rope_theta"] = short_double(c.rope_theta);
  if (c.rope_scaling.llama3) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", short_double(c.rope_scaling.factor)},
                         {"low_freq_factor", short_double(c.rope_scaling.low_freq_factor)},
                         {"high_freq_factor", short_double(c.rope_scaling.high_freq_factor)},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["vocab_size"] = c.vocab_size;
  j["tie_word_embeddings"] = c.tied_embeddings;
  if (c.arch != "qwen2") {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = false;
  } else {
    j["use_sliding_window"] = false;
  }
  j["bos_token_id"] = c.bos_id;
  if (c.eos_ids.size() > 1) j["eos_token_id"] = c.eos_ids;
  else j["eos_token_id"] = c.eos_id;
  j["torch_dtype"] = torch_dtype;
  j["use_cache"] = true;
  return j.dump(2) + "\n";
}

std::string hf_tensor_name(const std::string& canonical) {
  if (canonical == "token_embd") return "model.embed_tokens.weight";
  if (canonical == "output_norm") return "model.norm.weight";
  if (canonical == "output") return "lm_head.weight";
  if (canonical.rfind("blk.", 0) == 0) {
    const size_t dot = canonical.find('.', 4);
    LOOM_CHECK(dot != std::string::npos, canonical);
    const std::string layer = canonical.substr(4, dot - 4), rest = canonical.substr(dot + 1);
    static const std::pair<const char*, const char*> map[] = {
        {"attn_norm", "input_layernorm.weight"},   {"attn_q", "self_attn.q_proj.weight"},
        {"attn_k", "self_attn.k_proj.weight"},     {"attn_v", "self_attn.v_proj.weight"},
        {"attn_output", "self_attn.o_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
        {"attn_k.bias", "self_attn.k_proj.bias"},  {"attn_v.bias", "self_attn.v_proj.bias"},
        {"ffn_norm", "post_attention_layernorm.weight"}, {"ffn_gate", "mlp.gate_proj.weight"},
        {"ffn_up", "mlp.up_proj.weight"},          {"ffn_down", "mlp.down_proj.weight"}};
    for (auto& [k, v] : map)
      if (rest == k) return cat("model.layers.", layer, ".", v);
  }
  LOOM_CHECK(false, "unknown canonical tensor name ", canonical);
  return "";
}

}  // namespace loom
