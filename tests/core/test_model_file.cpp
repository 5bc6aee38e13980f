// The model file: round trip, and every kind of bad file gets a clear error that names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "h5_io.hpp"
#include "random_models.hpp"
#include "surrogate/flare.hpp"
#include "surrogate/model.hpp"

namespace st = surrogate::testing;
using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::ModelFile;

namespace {

class ModelFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("surrogate_model_file_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    cfg_ = surrogate::flare::Config{};
    cfg_.in_dim = 3;
    cfg_.out_dim = 2;
    cfg_.channel_dim = 16;
    cfg_.num_heads = 2;
    cfg_.num_latents = 4;
    cfg_.num_blocks = 2;
    cfg_.in_proj_hidden_dim = cfg_.out_proj_hidden_dim = cfg_.k_proj_hidden_dim = cfg_.v_proj_hidden_dim = cfg_.ffn_hidden_dim = 16;
    file_ = st::random_flare_file(cfg_, 3);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  /// Writes `f`, reads it back and builds the model; returns the error, failing if there was none.
  Error load_error(const ModelFile& f, const std::string& name) {
    f.write(path(name));
    try {
      auto model = surrogate::make_model(ModelFile::read(path(name)));
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "no error for " << name;
    return Error(ErrorCode::ok, "");
  }

  std::filesystem::path dir_;
  surrogate::flare::Config cfg_;
  ModelFile file_;
};

TEST_F(ModelFileTest, RoundTripKeepsEverything) {
  file_.normalization.input_mean = {1, 2, 3};
  file_.normalization.input_std = {0.5, 0.25, 2};
  file_.fields.output_names = {"p", "T"};
  file_.fields.output_units = {"Pa", "K"};
  file_.root.set("checkpoint", std::string("model.pt"));
  file_.write(path("m.h5"));
  const ModelFile back = ModelFile::read(path("m.h5"));
  EXPECT_EQ(back.architecture, "flare");
  EXPECT_EQ(back.source, file_.source);
  EXPECT_EQ(back.format_version, 1);
  EXPECT_EQ(back.config.values(), file_.config.values());
  ASSERT_EQ(back.weights.size(), file_.weights.size());
  for (const auto& [name, t] : file_.weights) {
    EXPECT_EQ(back.weights.at(name).shape, t.shape) << name;
    EXPECT_EQ(back.weights.at(name).values, t.values) << name;
  }
  EXPECT_EQ(back.normalization.input_std, file_.normalization.input_std);
  EXPECT_EQ(back.fields.output_units, file_.fields.output_units);
  EXPECT_EQ(back.root.get_string("checkpoint"), "model.pt");
  // The in-memory serialisation used for broadcasts is lossless too.
  const ModelFile copy = ModelFile::deserialize(back.serialize());
  EXPECT_EQ(copy.weights.at("blocks.1.att.latent_q").values, back.weights.at("blocks.1.att.latent_q").values);
  EXPECT_EQ(copy.config.values(), back.config.values());
}

TEST_F(ModelFileTest, ParameterCountOfTheOfficialElasticityModel) {
  const auto model = surrogate::make_model(st::random_flare_file(st::elasticity_config(), 1));
  EXPECT_EQ(model->parameter_count(), 592641);  // reference-models.md §3.8
}

TEST_F(ModelFileTest, MissingFile) {
  try {
    ModelFile::read(path("nope.h5"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
  }
}

TEST_F(ModelFileTest, NotAnHdf5File) {
  std::ofstream(path("text.h5")) << "this is not HDF5\n";
  try {
    ModelFile::read(path("text.h5"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io);
    EXPECT_NE(std::string(e.what()).find("not an HDF5 file"), std::string::npos) << e.what();
  }
}

TEST_F(ModelFileTest, TruncatedFile) {
  file_.write(path("full.h5"));
  const auto size = std::filesystem::file_size(path("full.h5"));
  std::filesystem::copy_file(path("full.h5"), path("cut.h5"));
  std::filesystem::resize_file(path("cut.h5"), size / 2);
  try {
    ModelFile::read(path("cut.h5"));
    FAIL() << "a truncated file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::io) << e.what();
    EXPECT_NE(std::string(e.what()).find("cut.h5"), std::string::npos) << e.what();
  }
}

TEST_F(ModelFileTest, WrongFormatVersion) {
  file_.format_version = 2;
  const Error e = load_error(file_, "v2.h5");
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_NE(std::string(e.what()).find("format_version 2"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("reads format_version 1"), std::string::npos) << e.what();
}

TEST_F(ModelFileTest, UnknownArchitecture) {
  file_.architecture = "transolver";
  const Error e = load_error(file_, "arch.h5");
  EXPECT_EQ(e.code(), ErrorCode::format);
  EXPECT_NE(std::string(e.what()).find("unknown architecture 'transolver'"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("flare"), std::string::npos) << e.what();
}

TEST_F(ModelFileTest, EveryWeightProblemIsListedByName) {
  file_.weights.erase("blocks.0.att.latent_q");
  file_.weights.erase("out_proj.1.fc2.bias");
  file_.weights["blocks.0.att.extra.weight"] = {{4}, {1, 2, 3, 4}};
  file_.weights["in_proj.fc1.weight"].shape = {3, 16};  // transposed
  file_.weights["blocks.1.mlp.fc2.bias"].values[3] = std::nanf("");
  const Error e = load_error(file_, "weights.h5");
  const std::string m = e.what();
  EXPECT_EQ(e.code(), ErrorCode::weights);
  for (const char* expected : {"missing tensors (2)", "blocks.0.att.latent_q", "out_proj.1.fc2.bias",
                               "unexpected tensors (1)", "blocks.0.att.extra.weight", "mis-shaped tensors (1)",
                               "in_proj.fc1.weight (3, 16), expected (16, 3)", "NaN or Inf", "blocks.1.mlp.fc2.bias"})
    EXPECT_NE(m.find(expected), std::string::npos) << "'" << expected << "' not in:\n" << m;
}

TEST_F(ModelFileTest, InvalidConfigurationNamesTheAttribute) {
  struct Case {
    const char* attribute;
    surrogate::AttributeValue value;
    const char* expected;
  };
  const Case cases[] = {
      {"num_heads", std::int64_t{3}, "not divisible by num_heads 3"},
      {"act", std::string("relu"), "'act' must be 'gelu' or 'silu'"},
      {"key_layout", std::string("v3"), "'key_layout'"},
      {"num_latents", std::int64_t{0}, "'num_latents' must be a positive integer"},
      {"attn_scale", -1.0, "'attn_scale' must be a positive number"},
      {"rmsnorm", std::int64_t{2}, "attribute 'rmsnorm' in /config"},
      {"channel_dim", std::string("big"), "attribute 'channel_dim' in /config"},
  };
  for (const Case& c : cases) {
    ModelFile f = file_;
    f.config.set(c.attribute, c.value);
    const Error e = load_error(f, std::string("config_") + c.attribute + ".h5");
    EXPECT_EQ(e.code(), ErrorCode::format) << c.attribute;
    EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
  }
  {
    ModelFile f = file_;
    f.config.set("rmsnorm", std::int64_t{2});
    EXPECT_NE(std::string(load_error(f, "rms2.h5").what()).find("must be 0 or 1, found 2"), std::string::npos);
    f = file_;
    f.config.set("channel_dim", std::string("big"));
    EXPECT_NE(std::string(load_error(f, "big.h5").what()).find("must be an integer, found 'big'"), std::string::npos);
  }
  ModelFile f = file_;
  f.config.erase("num_blocks");
  const Error e = load_error(f, "config_missing.h5");
  EXPECT_NE(std::string(e.what()).find("missing attribute 'num_blocks' in /config"), std::string::npos) << e.what();
}

TEST_F(ModelFileTest, NormalizationMustMatchTheChannels) {
  ModelFile f = file_;
  f.normalization.output_mean = {0, 0, 0};
  f.normalization.output_std = {1, 1, 1};
  Error e = load_error(f, "norm_len.h5");
  EXPECT_NE(std::string(e.what()).find("/normalization/output_mean has 3 entries but the model has 2"), std::string::npos)
      << e.what();
  f = file_;
  f.normalization.input_mean = {0, 0, 0};
  f.normalization.input_std = {1, 0, 1};
  e = load_error(f, "norm_zero.h5");
  EXPECT_NE(std::string(e.what()).find("std non-zero"), std::string::npos) << e.what();
}

TEST_F(ModelFileTest, NotASurrogateFile) {
  ModelFile f = file_;
  f.root.set("format", std::string("something-else"));
  // write() always stamps the format, so write a foreign HDF5 file differently: an HDF5 file with data only
  const std::string p = path("foreign.h5");
  st::write_file(p, {{"coords", {2, 2}, {0, 0, 1, 1}}});
  try {
    ModelFile::read(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::format);
    EXPECT_NE(std::string(e.what()).find("not a surrogate model file"), std::string::npos) << e.what();
  }
}

}  // namespace
