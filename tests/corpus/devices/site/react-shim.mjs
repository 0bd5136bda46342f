// react-intersection-observer's ES module imports "react": React's own UMD build, as ESM.
const React = window.React;
export default React;
export const {
  Children, Component, Fragment, createContext, createElement, createRef, forwardRef, memo,
  useCallback, useContext, useEffect, useLayoutEffect, useMemo, useRef, useState,
} = React;
