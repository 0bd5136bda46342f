// react-responsive's ES module imports "prop-types": its own UMD build's global, as ESM.
export default window.PropTypes;
