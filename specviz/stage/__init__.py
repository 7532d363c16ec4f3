"""The embedded models as a stage, measured by running methods on them: sample grids, uncertainty per
token, recognition of samples among the training images, and every target of the stage in one command.
Above the models and the decoding methods (it runs them), so `specviz.models` never imports decoding."""
